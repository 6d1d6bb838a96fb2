package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// etcdProcess is upstream's store, Debian's etcd-server, run on a throwaway
// data directory and loopback ports for the comparison with kine on
// PostgreSQL. Like the API server's own etcd it fsyncs its log at every
// commit, as PostgreSQL does with synchronous_commit on.
type etcdProcess struct {
	// ClientURL is where the API server reaches it
	// (INVISIBLE_DOTS_ETCD_SERVERS).
	ClientURL string
	logPath   string

	*child
}

// etcdReadyTimeout bounds how long a fresh etcd may take to answer /health.
const etcdReadyTimeout = 30 * time.Second

// startEtcd runs bin as a single-member etcd with its data in dir and its
// output in logPath, and returns once /health says it is healthy.
func startEtcd(ctx context.Context, bin, dir, logPath string) (*etcdProcess, error) {
	client, err := freeAddress()
	if err != nil {
		return nil, err
	}
	peer, err := freeAddress()
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the etcd log: %w", err)
	}
	e := &etcdProcess{ClientURL: "http://" + client, logPath: logPath}
	peerURL := "http://" + peer
	cmd := exec.Command(bin,
		"--name=bench",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+e.ClientURL,
		"--advertise-client-urls="+e.ClientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=bench="+peerURL,
		"--initial-cluster-state=new",
		"--logger=zap",
		"--log-outputs=stderr",
	)
	// The API server would otherwise find a configuration of etcd's in the
	// environment (ETCD_*) we did not mean.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	// As for the server (startServer): a killed benchmark stops etcd too.
	if e.child, err = startChild(cmd, logFile, syscall.SIGTERM); err != nil {
		return nil, err
	}
	if err := e.waitHealthy(ctx); err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

func (e *etcdProcess) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, etcdReadyTimeout)
	defer cancel()
	probe := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		select {
		case <-e.exited:
			return fmt.Errorf("etcd exited before it was healthy (%v); its log %s ends:\n%s", e.waitErr, e.logPath, fileTail(e.logPath, 20))
		case <-ctx.Done():
			return fmt.Errorf("etcd was not healthy within %s (last: %v); its log %s ends:\n%s", etcdReadyTimeout, last, e.logPath, fileTail(e.logPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
		last = etcdHealth(ctx, probe, e.ClientURL)
		if last == nil {
			return nil
		}
	}
}

func etcdHealth(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"true"`) {
		return fmt.Errorf("/health answered %s: %s", resp.Status, body)
	}
	return nil
}

// stop sends SIGTERM and waits; after ten seconds it kills.
func (e *etcdProcess) stop() {
	select {
	case <-e.exited:
		return
	default:
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(10 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
}

// clockTick is the unit of the CPU times in /proc/pid/stat (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

// cpuTime is the CPU time, user and system, that pid has used.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read the stat of process %d: %w", pid, err)
	}
	// The fields after the command name: state is the first, utime the
	// 12th and stime the 13th.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("the stat of process %d is short", pid)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("the stat of process %d: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// treeCPU is the CPU time of pid and, apart, of its descendants living now
// (the managed PostgreSQL and its backends, which kine's pool keeps).
func treeCPU(pid int) (self, children time.Duration, err error) {
	if self, err = cpuTime(pid); err != nil {
		return 0, 0, err
	}
	kids, err := descendants(pid)
	if err != nil {
		return 0, 0, err
	}
	for _, k := range kids {
		if d, err := cpuTime(k.pid); err == nil {
			children += d
		}
	}
	return self, children, nil
}

// fileTail is the last n lines of the file at path.
func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// withEnv writes an executable script in dir that runs bin with the
// variables in env added, and returns its path. startServer clears every
// INVISIBLE_DOTS_ variable of the benchmark's own environment, so a
// variable the server must see goes in here; the script execs bin, so the
// server keeps the script's process id (memory reads, signals).
func withEnv(dir, bin string, env map[string]string) (string, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	sb.WriteString("#!/bin/sh\n")
	for k, v := range env {
		fmt.Fprintf(&sb, "%s=%s\nexport %s\n", k, shellQuote(v), k)
	}
	fmt.Fprintf(&sb, "exec %s \"$@\"\n", shellQuote(abs))
	path := filepath.Join(dir, "invisible-dots-with-env")
	if err := os.WriteFile(path, []byte(sb.String()), 0o700); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
