package agentd

import (
	"bufio"
	"bytes"
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
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/agentd/agentdtest"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func writeConfig(t *testing.T, dir string, gc protocol.GuestConfig) string {
	t.Helper()
	b, _ := json.Marshal(gc)
	p := filepath.Join(dir, "config.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunDevelopmentMode(t *testing.T) {
	dir := t.TempDir()
	var logs agentdtest.LockedBuffer
	cfg := writeConfig(t, dir, protocol.GuestConfig{DotID: "ns/dot", Token: testToken})
	sockDir, _ := os.MkdirTemp("", "agentd")
	defer os.RemoveAll(sockDir)
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Listen: "127.0.0.1:0", Socket: filepath.Join(sockDir, "a.sock"), ConfigPath: cfg, RunAs: "", Home: dir,
			Log: slog.New(slog.NewTextHandler(&logs, nil)), Ready: func(a net.Addr) { addr <- a }})
	}()
	var a net.Addr
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("Run ended at once: %v", err)
	}
	req, _ := http.NewRequest("GET", "http://"+a.String()+protocol.PathHealth, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health through Run = %v %v", resp, err)
	}
	resp.Body.Close()
	conn, err := net.Dial("unix", filepath.Join(sockDir, "a.sock"))
	if err != nil {
		t.Fatalf("the local socket does not accept: %v", err)
	}
	conn.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if !strings.Contains(logs.String(), "development mode") {
		t.Fatalf("the log does not say development mode:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), testToken) {
		t.Fatal("the log holds the token")
	}
}

func TestRunRefusals(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"dotId":`), 0o644)
	short := filepath.Join(dir, "short.json")
	os.WriteFile(short, []byte(`{"dotId":"a/b","token":"short-tok"}`), 0o644)
	good := writeConfig(t, dir, protocol.GuestConfig{DotID: "ns/dot", Token: testToken})
	for name, o := range map[string]Options{
		"missing config": {ConfigPath: filepath.Join(dir, "none.json")},
		"bad json":       {ConfigPath: bad},
		"short token":    {ConfigPath: short},
		"unknown user":   {ConfigPath: good, RunAs: "no-such-user-here"},
		"relative home":  {ConfigPath: good, Home: "home"},
	} {
		t.Run(name, func(t *testing.T) {
			o.Listen = "127.0.0.1:0"
			o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
			err := Run(t.Context(), o)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			if strings.Contains(err.Error(), "short-tok") || strings.Contains(err.Error(), testToken) {
				t.Fatalf("the error quotes the token: %v", err)
			}
		})
	}
}

// buildStatic builds one of this repository's commands without cgo.
func buildStatic(t *testing.T, pkg, out string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// TestDaemonCapabilities runs the real binary as nobody, as its unit runs it
// as dotagentd: without CAP_SETUID, CAP_SETGID and CAP_KILL it refuses to act
// as another user; with them (ambient, from dots-launch) it serves, empties
// its own ambient set, and its commands hold no capability.
func TestDaemonCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting the daemon as nobody with capabilities needs root")
	}
	if _, err := LookupIdentity("nobody"); err != nil {
		t.Skipf("no nobody user: %v", err)
	}
	bin, err := os.MkdirTemp("", "agentd-bin")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	os.Chmod(bin, 0o755)
	agentd, launch := filepath.Join(bin, "dot-agentd"), filepath.Join(bin, "dots-launch")
	buildStatic(t, "github.com/invisible-dots/invisible-dots/guest/agentd/cmd/dot-agentd", agentd)
	buildStatic(t, "github.com/invisible-dots/invisible-dots/guest/image/cmd/dots-launch", launch)
	home := filepath.Join(bin, "home")
	os.MkdirAll(home, 0o755)
	cfg := writeConfig(t, bin, protocol.GuestConfig{DotID: "ns/dot", Token: testToken})
	args := []string{"--", agentd, "--run-as", "nobody", "--config", cfg, "--listen", "127.0.0.1:0", "--socket", "", "--home", home}

	out, err := exec.Command(launch, append([]string{"--user", "nobody", "--caps", ""}, args...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "CAP_SETUID") {
		t.Fatalf("dot-agentd without capabilities = %v\n%s\nwant a refusal naming CAP_SETUID", err, out)
	}

	cmd := exec.Command(launch, append([]string{"--user", "nobody", "--caps", "setuid,setgid,kill"}, args...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addrRE := regexp.MustCompile(`tcp=(127\.0\.0\.1:\d+)`)
	sc := bufio.NewScanner(stderr)
	var addr string
	for sc.Scan() {
		if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
			break
		}
	}
	if addr == "" {
		t.Fatal("the daemon never said where it listens")
	}
	go io.Copy(io.Discard, stderr)
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if !regexp.MustCompile(`(?m)^CapAmb:\s+0+$`).Match(status) || !regexp.MustCompile(`(?m)^CapEff:\s+0+e0$`).Match(status) {
		t.Fatalf("the daemon's capabilities, want CapEff e0 and CapAmb 0:\n%s", status)
	}
	body, _ := json.Marshal(protocol.ExecRequest{Command: "id -u; grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status"})
	req, _ := http.NewRequest("POST", "http://"+addr+protocol.PathExec, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	cl := &http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got protocol.ExecResponse
	json.NewDecoder(resp.Body).Decode(&got)
	lines := strings.Split(strings.TrimSpace(got.Stdout), "\n")
	if len(lines) != 5 || lines[0] != "65534" {
		t.Fatalf("exec through the daemon = %+v", got)
	}
	for _, l := range lines[1:] {
		if !strings.HasSuffix(l, "0000000000000000") {
			t.Errorf("a command holds a capability: %s", l)
		}
	}
}
