package mcphost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/agentd/agentdtest"
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
	home := t.TempDir()
	agentd := agentdtest.Start(t, home, "test/mcp")
	bin, socket := agentd.Bin, agentd.Socket
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-token-value-7781"
	var logs agentdtest.LockedBuffer
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
		t.Fatalf("status after Ready = %+v\ndot-agentd:\n%s", st, agentd.Log())
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
		for name, l := range map[string]string{"engine": logs.String(), "dot-agentd": agentd.Log()} {
			if strings.Contains(l, secret) {
				t.Errorf("the %s log holds the secret:\n%s", name, l)
			}
		}
	})
}

func newTestLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
