package agentd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// daemonEnv makes the test binary a dot-agentd (TestMain) serving the
// config it names, with the file limit of the product's unit (256), for
// BenchmarkHostileConnections.
const daemonEnv = "AGENTD_TEST_DAEMON_CONFIG"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(daemonEnv); cfg != "" {
		os.Exit(runDaemon(cfg))
	}
	os.Exit(m.Run())
}

func runDaemon(cfg string) int {
	lim := syscall.Rlimit{Cur: 256, Max: 256}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		return 2
	}
	err := Run(context.Background(), Options{Listen: "127.0.0.1:0", ConfigPath: cfg, Home: filepath.Dir(cfg),
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Ready: func(a net.Addr) { fmt.Println(a.String()) }})
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// BenchmarkHostileConnections holds 1,000 hostile connections against a
// dot-agentd whose file limit is 256 (silent ones, ones that asked the proof
// and keep the connection, ones sending their head a byte a second; each
// dialled again as soon as it is closed) while the host asks GET /v1/health
// ten times a second, and reports the health checks' p50 and p99.
func BenchmarkHostileConnections(b *testing.B) {
	const hostile = 1000
	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "config.json")
	raw, _ := json.Marshal(protocol.GuestConfig{DotID: "ns/dot", Token: testToken})
	os.WriteFile(cfgPath, raw, 0o644)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), daemonEnv+"="+cfgPath)
	cmd.Stderr = os.Stderr
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the daemon did not start: %v", err)
	}
	addr := strings.TrimSpace(line)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var held, dials atomic.Int64
	for i := range hostile {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				dials.Add(1)
				held.Add(1)
				hold(ctx, c, i%3)
				held.Add(-1)
				c.Close()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(3 * time.Second) // let the flood build

	// The host's checks: on its kept connection, as guestclient pools them,
	// and on a new connection each time (the first after a restart).
	pooled := &http.Client{Timeout: 10 * time.Second}
	fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var lat = map[string][]time.Duration{}
	failed := 0
	for range b.N {
		for range 100 {
			for name, cl := range map[string]*http.Client{"pooled": pooled, "fresh": fresh} {
				req, _ := http.NewRequest("GET", "http://"+addr+protocol.PathHealth, nil)
				req.Header.Set("Authorization", "Bearer "+testToken)
				start := time.Now()
				resp, err := cl.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed++
					if failed <= 3 {
						b.Logf("%s health check failed after %v: %v", name, time.Since(start), err)
					}
				}
				lat[name] = append(lat[name], time.Since(start))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stop()
	wg.Wait()
	for _, name := range []string{"pooled", "fresh"} {
		l := lat[name]
		slices.Sort(l)
		p := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))].Microseconds()) / 1000 }
		b.ReportMetric(p(0.5), name+"-p50-ms")
		b.ReportMetric(p(0.99), name+"-p99-ms")
		b.Logf("%s: %d health checks under %d hostile connections: p50 %.1f ms, p99 %.1f ms, max %.1f ms", name, len(l), hostile, p(0.5), p(0.99), p(1))
	}
	b.ReportMetric(float64(failed), "failed")
	b.ReportMetric(float64(dials.Load()), "hostile-dials")
	b.Logf("%d hostile dials in all; %d health checks failed", dials.Load(), failed)
	if failed > 0 {
		b.Errorf("%d health checks failed under the flood", failed)
	}
}

// hold keeps one hostile connection the way kind says until the daemon
// closes it or ctx ends: 0 sends nothing, 1 asks the proof and keeps the
// connection, 2 sends its head a byte a second.
func hold(ctx context.Context, c net.Conn, kind int) {
	go func() { <-ctx.Done(); c.Close() }()
	switch kind {
	case 1:
		fmt.Fprintf(c, "GET %s?nonce=%s HTTP/1.1\r\nHost: x\r\n\r\n", protocol.PathProof, strings.Repeat("ab", 16))
	case 2:
		head := "GET " + protocol.PathHealth + " HTTP/1.1\r\nHost: x\r\n"
		go func() {
			for i := 0; ctx.Err() == nil; i++ {
				if _, err := c.Write([]byte{head[i%len(head)]}); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}()
	}
	io.Copy(io.Discard, c) // until the daemon closes it
}
