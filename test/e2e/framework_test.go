// Package e2e drives the real product: the invisible-dots binary built once
// for the package, started as `invisible-dots server` on fresh homes, and the
// real kubectl. Nothing here links the API server; what runs is what a person
// runs.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the invisible-dots binary built by TestMain.
var binary string

// repoRoot is the repository's top directory.
var repoRoot string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	dir, err := os.MkdirTemp("", "ide2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "invisible-dots")
	if prebuilt := os.Getenv("INVISIBLE_DOTS_E2E_BINARY"); prebuilt != "" {
		binary = prebuilt
	} else {
		// The same flags as `make build`, so kubectl version shows the
		// embedded version.
		ldflags := "-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" +
			" -X github.com/invisible-dots/invisible-dots/internal/version.Version=" + e2eVersion
		build := exec.Command("go", "build", "-ldflags", ldflags, "-o", binary, ".")
		build.Dir = repoRoot
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build the invisible-dots binary:", err)
			return 1
		}
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e needs kubectl on PATH (CI installs it; see .ci/run)")
		return 1
	}
	return m.Run()
}

// server is one running `invisible-dots server`.
type server struct {
	t       testing.TB
	home    string
	addr    string
	env     []string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
	mu      sync.Mutex
}

// newHome makes an empty home directory with a short path (the PostgreSQL
// socket path is limited to 107 bytes).
func newHome(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ide2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "home")
}

func freeAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServer starts the server on home and waits until kubectl can list
// namespaces through the kubeconfig it wrote. extraEnv adds KEY=VALUE pairs.
func startServer(t testing.TB, home string, extraEnv ...string) *server {
	t.Helper()
	s := launchServer(t, home, extraEnv...)
	s.waitReady()
	return s
}

// launchServer starts the server without waiting for it.
func launchServer(t testing.TB, home string, extraEnv ...string) *server {
	t.Helper()
	return launch(t, home, []string{"server", "--no-web"}, extraEnv...)
}

// launch starts `invisible-dots ARGS...` on home (a server, or a host
// agent) without waiting for it.
func launch(t testing.TB, home string, args []string, extraEnv ...string) *server {
	t.Helper()
	s := &server{t: t, home: home, addr: freeAddress(t), done: make(chan struct{})}
	s.env = append(os.Environ(), "INVISIBLE_DOTS_HOME="+home, "INVISIBLE_DOTS_LISTEN="+s.addr)
	s.env = append(s.env, extraEnv...)
	if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	log, err := os.CreateTemp(filepath.Dir(home), args[0]+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	s.logPath = log.Name()
	s.cmd = exec.Command(binary, args...)
	s.cmd.Env = s.env
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// Its own process group, so a test's kill reaches the server alone, the
	// way a person's kill would.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := s.cmd.Wait()
		log.Close()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", args[0], s.logPath, s.logTail(80))
		}
	})
	return s
}

func (s *server) kubeconfig() string { return filepath.Join(s.home, "kubeconfig") }

func (s *server) waitReady() {
	s.t.Helper()
	s.waitReadyIn(s.t)
}

// waitReadyIn waits as waitReady does and fails t: a subtest that starts a
// server meant to outlive it launches it on the parent test (whose cleanup
// stops it) and fails itself, not its parent, when it does not come up.
func (s *server) waitReadyIn(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			t.Fatalf("the server exited while starting: %v\n%s", s.waitErr, s.logTail(40))
		default:
		}
		if _, err := os.Stat(s.kubeconfig()); err == nil {
			if _, err := s.kubectl("get", "namespaces"); err == nil {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the server did not become ready in 3 minutes:\n%s", s.logTail(40))
}

// stop sends SIGINT and waits for a clean exit.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		s.t.Errorf("the server did not stop within 60 s of SIGINT")
	}
}

// kill9 kills the server outright, as a crash or an OOM kill would.
func (s *server) kill9() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// exited waits up to d for the server to exit by itself.
func (s *server) exited(d time.Duration) bool {
	select {
	case <-s.done:
		return true
	default:
	}
	select {
	case <-s.done:
		return true
	case <-time.After(d):
		return false
	}
}

// logLinesSince returns the first limit lines of the log stamped at or after
// since that contain word (case-insensitive): what one part of the server
// said after an event, which the log's tail has long scrolled past.
func (s *server) logLinesSince(since time.Time, word string, limit int) string {
	word = strings.ToLower(word)
	var out []string
	for _, line := range strings.Split(readFile(s.logPath), "\n") {
		stamp, _, _ := strings.Cut(line, " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || at.Before(since) || !strings.Contains(strings.ToLower(line), word) {
			continue
		}
		if out = append(out, line); len(out) == limit {
			break
		}
	}
	return strings.Join(out, "\n")
}

func (s *server) logTail(lines int) string {
	data, _ := os.ReadFile(s.logPath)
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// kubectl runs the real kubectl against this server and returns its
// combined output.
func (s *server) kubectl(args ...string) (string, error) {
	return s.kubectlIn("", args...)
}

// kubectlIn runs kubectl with stdin.
func (s *server) kubectlIn(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", s.kubeconfig()}, args...)...)
	cmd.Dir = repoRoot
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// mustKubectl fails the test when kubectl fails.
func (s *server) mustKubectl(args ...string) string {
	s.t.Helper()
	out, err := s.kubectl(args...)
	if err != nil {
		s.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// eventually retries f until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = f(); last == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: still failing after %s: %v", what, timeout, last)
}
