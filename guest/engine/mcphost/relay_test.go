package mcphost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// envAsServer makes this test binary a stdio MCP server (TestMain): the
// relay test declares it as a command server, so the server is real Go, run
// as a process of its own through the real relay.
const envAsServer = "MCPHOST_TEST_AS_SERVER"

func serveStdio() int {
	srv := testServer(func() {
		fmt.Fprintln(os.Stderr, "boom: the server crashed on purpose")
		os.Exit(3)
	})
	if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	return 0
}

// buildAgentd builds dot-agentd from guest/agentd/cmd/dot-agentd, whose relay
// the engine runs for every command server.
func buildAgentd(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to build dot-agentd")
	}
	bin := filepath.Join(t.TempDir(), "dot-agentd")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/invisible-dots/invisible-dots/guest/agentd/cmd/dot-agentd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build dot-agentd: %v\n%s", err, out)
	}
	return bin
}

// startAgentd runs dot-agentd in development mode (work runs as this test's
// user) and returns its local socket and its log.
func startAgentd(t *testing.T, bin, home string) (string, *lockedBuilder) {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcpr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "agentd.sock")
	config := filepath.Join(dir, "config.json")
	gc, _ := json.Marshal(protocol.GuestConfig{DotID: "test/mcp", Token: "test-token-0123456789abcdef"})
	if err := os.WriteFile(config, gc, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--socket", socket, "--config", config, "--run-as", "", "--home", home)
	cmd.Dir = dir
	logs := &lockedBuilder{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	waitFor(t, "dot-agentd's socket", func() bool {
		c, err := net.Dial("unix", socket)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return socket, logs
}

// processesHolding lists the processes of this machine whose command line
// holds s.
func processesHolding(s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, fmt.Sprintf("%s: %q", d, strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return out
}

func TestThroughTheRealRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs dot-agentd")
	}
	bin := buildAgentd(t)
	home := t.TempDir()
	socket, agentdLog := startAgentd(t, bin, home)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-token-value-7781"
	var logs lockedBuilder
	s := NewServers(ServersOptions{
		Launcher: Launcher{RelayPath: bin, AgentdSocket: socket, Cwd: home, Path: os.Getenv("PATH"), TerminateAfter: time.Second},
		Backoff:  Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Stable: time.Hour},
		ToolName: modelName,
		Log:      newTestLogger(&logs),
	})
	defer s.Close()
	entry := protocol.MCPServerConfig{Command: self, Args: []string{"-test.run=^$"},
		Env: map[string]string{envAsServer: "1", "PLAIN": "plain-value"}, Secrets: []string{"API_TOKEN"}}
	cfg := config(map[string]protocol.MCPServerConfig{"probe": entry}, nil)
	s.Apply(cfg, map[string]map[string]string{"probe": {"API_TOKEN": secret}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Ready(ctx)
	if st := s.Status(); len(st) != 1 || st[0].State != protocol.MCPConnected {
		t.Fatalf("status after Ready = %+v\ndot-agentd:\n%s", st, agentdLog)
	}

	t.Run("the secret is in the server's environment", func(t *testing.T) {
		got := s.Call(ctx, "mcp__probe__env", json.RawMessage(`{"text":"API_TOKEN"}`))
		// The result passes through the engine's mask, so the value reads
		// as *** to the model: that it is *** and not empty proves it arrived.
		if !got.OK || got.Text != "***" {
			t.Errorf("API_TOKEN in the server = %+v, want the secret (masked as ***)", got)
		}
		if got := s.Call(ctx, "mcp__probe__env", json.RawMessage(`{"text":"PLAIN"}`)); got.Text != "plain-value" {
			t.Errorf("PLAIN in the server = %+v", got)
		}
	})

	t.Run("the secret is on no command line", func(t *testing.T) {
		if procs := processesHolding(secret); len(procs) > 0 {
			t.Errorf("processes carry the secret on their command line:\n%s", strings.Join(procs, "\n"))
		}
		cmd, err := Launcher{RelayPath: bin, AgentdSocket: socket}.RelayCommand(entry, map[string]string{"API_TOKEN": secret})
		if err != nil {
			t.Fatal(err)
		}
		line := strings.Join(cmd.Args, " ")
		if strings.Contains(line, secret) || !strings.Contains(line, "--env-from API_TOKEN") {
			t.Errorf("relay command line = %q; want the secret named with --env-from and its value absent", line)
		}
	})

	t.Run("a crash is restarted and says what the server wrote", func(t *testing.T) {
		got := s.Call(ctx, "mcp__probe__crash", nil)
		if got.OK || !strings.Contains(got.Text, "went away during the call") {
			t.Errorf("the call that crashed the server = %+v", got)
		}
		waitFor(t, "the failed state", func() bool {
			st := s.Status()
			return len(st) == 1 && st[0].State != protocol.MCPConnected
		})
		waitFor(t, "the server to be restarted", func() bool {
			st := s.Status()
			return len(st) == 1 && st[0].State == protocol.MCPConnected
		})
		if got := s.Call(ctx, "mcp__probe__echo", json.RawMessage(`{"text":"again"}`)); !got.OK || got.Text != "echo: again" {
			t.Errorf("a call after the restart = %+v", got)
		}
		if l := logs.String(); !strings.Contains(l, "boom: the server crashed on purpose") || !strings.Contains(l, "exit status 3") {
			t.Errorf("the engine's log does not say what the server wrote on its standard error:\n%s", logs.String())
		}
	})

	t.Run("no log holds the secret", func(t *testing.T) {
		for name, l := range map[string]string{"engine": logs.String(), "dot-agentd": agentdLog.String()} {
			if strings.Contains(l, secret) {
				t.Errorf("the %s log holds the secret:\n%s", name, l)
			}
		}
	})
}

// lockedBuilder is a log sink the servers' goroutines write to at once.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newTestLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
