package mcphost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/agentd/agentdtest"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestMain(m *testing.M) {
	// The relay test runs this test binary as its stdio MCP server.
	if os.Getenv(envAsServer) == "1" {
		os.Exit(serveStdio())
	}
	os.Exit(agentdtest.Main(m))
}

type echoIn struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

// testServer is an MCP server of the SDK with the tools the tests call:
// echo, env (a variable of its environment), sleep (until cancelled), fail
// (an error result) and crash (its process or session ends).
func testServer(crash func()) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ServerOptions{Instructions: "Use echo to echo."})
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echo the text."}, func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "env", Description: "A variable of the server's environment."}, func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: os.Getenv(in.Text)}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "sleep", Description: "Wait until cancelled."}, func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Fail."}, func(_ context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "it failed"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "crash", Description: "End the server."}, func(_ context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		crash()
		select {}
	})
	return s
}

// memServer serves testServer over the SDK's in-memory transport, a new
// session at every dial, and counts the dials and their times.
type memServer struct {
	mu       sync.Mutex
	dials    []time.Time
	sessions []*sdk.ServerSession
	servers  []*sdk.Server
	// failDials makes the first n dials fail, as a program that is not
	// installed does.
	failDials int
	// silent makes the server never answer (a start that times out).
	silent bool
}

func (m *memServer) dial(io.Writer) (sdk.Transport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dials = append(m.dials, time.Now())
	if len(m.dials) <= m.failDials {
		return nil, fmt.Errorf("program not found")
	}
	if m.silent {
		// A server that reads what it is sent and never answers.
		c1, c2 := net.Pipe()
		go io.Copy(io.Discard, c2)
		m.sessions = append(m.sessions, nil)
		return &sdk.IOTransport{Reader: c1, Writer: c1}, nil
	}
	// The SDK's in-memory transport is a net.Pipe; it is made here so a
	// crash can cut the pipe itself, as a process that died does (closing
	// the server's session would wait for the crashing call).
	c1, c2 := net.Pipe()
	srv := testServer(func() { c2.Close() })
	ss, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: c2, Writer: c2}, nil)
	if err != nil {
		return nil, err
	}
	m.sessions = append(m.sessions, ss)
	m.servers = append(m.servers, srv)
	return &sdk.IOTransport{Reader: c1, Writer: c1}, nil
}

func (m *memServer) dialCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.dials)
}

func (m *memServer) dialTimes() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Time(nil), m.dials...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func modelName(server, tool string) string { return "mcp__" + server + "__" + tool }

func newServers(t *testing.T, dial func(string) Dialer, b Backoff) *Servers {
	t.Helper()
	s := NewServers(ServersOptions{Backoff: b, ToolName: modelName,
		Dial: func(name string, _ protocol.MCPServerConfig, _ map[string]string) Dialer { return dial(name) }})
	t.Cleanup(s.Close)
	return s
}

func config(servers map[string]protocol.MCPServerConfig, perms map[string]protocol.Decision) *protocol.RuntimeConfig {
	if perms == nil {
		perms = map[string]protocol.Decision{}
	}
	for name := range servers {
		if _, ok := perms["mcp."+name]; !ok {
			perms["mcp."+name] = protocol.Ask
		}
	}
	return &protocol.RuntimeConfig{Name: "d", MCPServers: servers, Permissions: perms}
}

func TestServersInMemory(t *testing.T) {
	mem := &memServer{}
	s := newServers(t, func(string) Dialer { return mem.dial }, Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Stable: time.Hour})
	s.Apply(config(map[string]protocol.MCPServerConfig{"mem": {Command: "unused"}}, nil), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Ready(ctx)

	if d := cmp.Diff([]protocol.MCPServerStatus{{Name: "mem", State: protocol.MCPConnected, Tools: 5}}, s.Status()); d != "" {
		t.Fatalf("status after Ready (-want +got):\n%s", d)
	}
	var names []string
	for _, tl := range s.Tools() {
		names = append(names, tl.Name)
	}
	if d := cmp.Diff([]string{"mcp__mem__crash", "mcp__mem__echo", "mcp__mem__env", "mcp__mem__fail", "mcp__mem__sleep"}, sortStrings(names)); d != "" {
		t.Errorf("tools offered (-want +got):\n%s", d)
	}
	if got := s.Instructions()["mem"]; got != "Use echo to echo." {
		t.Errorf("instructions = %q", got)
	}

	tests := map[string]struct {
		reason string
		tool   string
		args   string
		want   CallResult
	}{
		"echo":  {"a text result comes back as the server wrote it", "mcp__mem__echo", `{"text":"hi"}`, CallResult{Text: "echo: hi", OK: true}},
		"error": {"an error result is a failed call, its text kept", "mcp__mem__fail", `{}`, CallResult{Text: "it failed"}},
		"none":  {"a tool of no connected server does not run", "mcp__other__echo", `{}`, CallResult{Text: `There is no connected MCP tool named "mcp__other__echo". The call did not run.`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := s.Call(ctx, tc.tool, json.RawMessage(tc.args))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s\nCall(%s, %s) (-want +got):\n%s", tc.reason, tc.tool, tc.args, d)
			}
		})
	}

	t.Run("validate", func(t *testing.T) {
		if _, err := s.Validate("mcp__mem__echo", json.RawMessage(`{"text":"x"}`)); err != nil {
			t.Errorf("valid arguments refused: %v", err)
		}
		if _, err := s.Validate("mcp__mem__echo", json.RawMessage(`{"text":3}`)); err == nil {
			t.Errorf("a number for a string argument was accepted")
		}
		if _, err := s.Validate("mcp__mem__echo", json.RawMessage(`[1]`)); err == nil {
			t.Errorf("an array for the arguments was accepted")
		}
	})

	t.Run("removed from the config", func(t *testing.T) {
		s.Apply(config(nil, nil), nil)
		if got := s.Status(); len(got) != 0 {
			t.Errorf("status after the server was removed = %+v", got)
		}
		if got := s.Tools(); len(got) != 0 {
			t.Errorf("tools after the server was removed = %+v", got)
		}
	})
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestCallTimeout(t *testing.T) {
	mem := &memServer{}
	srv := StartServer(ServerOptions{Name: "mem", Dial: mem.dial, Timeout: 100 * time.Millisecond})
	defer srv.Close()
	srv.Wait(context.Background())
	start := time.Now()
	got := srv.Call(context.Background(), "sleep", nil)
	took := time.Since(start)
	if got.OK || !strings.Contains(got.Text, "took longer than its timeout_s (100ms) and was abandoned") {
		t.Errorf("a call past its timeout = %+v", got)
	}
	if took > 5*time.Second {
		t.Errorf("the call took %s; its timeout was 100ms", took)
	}
	// The server stays connected: a slow call is not a crash.
	if got := srv.Call(context.Background(), "echo", json.RawMessage(`{"text":"still"}`)); !got.OK || got.Text != "echo: still" {
		t.Errorf("a call after the timeout = %+v", got)
	}
}

func TestRestartWithBackoff(t *testing.T) {
	b := Backoff{Initial: 40 * time.Millisecond, Max: 160 * time.Millisecond, Stable: time.Hour}

	t.Run("a crash fails the call and the server comes back", func(t *testing.T) {
		mem := &memServer{}
		srv := StartServer(ServerOptions{Name: "mem", Dial: mem.dial, Backoff: b})
		defer srv.Close()
		srv.Wait(context.Background())
		got := srv.Call(context.Background(), "crash", nil)
		if got.OK || !strings.Contains(got.Text, "went away during the call") || !strings.Contains(got.Text, "not repeated") {
			t.Errorf("the call that found the crash = %+v", got)
		}
		waitFor(t, "the server to start again", func() bool {
			return mem.dialCount() == 2 && srv.Status().State == protocol.MCPConnected
		})
		times := mem.dialTimes()
		if gap := times[1].Sub(times[0]); gap < b.Initial {
			t.Errorf("restarted %s after the first start; the backoff is %s", gap, b.Initial)
		}
		if got := srv.Call(context.Background(), "echo", json.RawMessage(`{"text":"back"}`)); !got.OK {
			t.Errorf("a call after the restart = %+v", got)
		}
	})

	t.Run("failing starts are spaced by a growing delay", func(t *testing.T) {
		mem := &memServer{failDials: 3}
		srv := StartServer(ServerOptions{Name: "mem", Dial: mem.dial, Backoff: b})
		defer srv.Close()
		waitFor(t, "the fourth start to connect", func() bool { return srv.Status().State == protocol.MCPConnected })
		times := mem.dialTimes()
		if len(times) != 4 {
			t.Fatalf("dials = %d, want 4", len(times))
		}
		want := []time.Duration{40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond}
		for i, w := range want {
			if gap := times[i+1].Sub(times[i]); gap < w {
				t.Errorf("start %d came %s after the one before; the backoff is %s", i+2, gap, w)
			}
		}
	})

	t.Run("a turn's Ready skips the backoff of a failed start", func(t *testing.T) {
		mem := &memServer{failDials: 1}
		srv := StartServer(ServerOptions{Name: "mem", Dial: mem.dial, Backoff: Backoff{Initial: time.Hour, Max: time.Hour, Stable: time.Hour}})
		defer srv.Close()
		waitFor(t, "the first start to fail", func() bool { return srv.Status().State == protocol.MCPFailed })
		if st := srv.Status(); !strings.Contains(st.Error, "program not found") {
			t.Errorf("failed status = %+v", st)
		}
		srv.Retry()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Wait(ctx)
		if st := srv.Status(); st.State != protocol.MCPConnected {
			t.Errorf("after Retry and Wait: %+v", st)
		}
	})
}

func TestNotStartedAgain(t *testing.T) {
	t.Run("a start that times out", func(t *testing.T) {
		mem := &memServer{silent: true}
		srv := StartServer(ServerOptions{Name: "mem", Dial: mem.dial, StartupTimeout: 100 * time.Millisecond,
			Backoff: Backoff{Initial: time.Millisecond, Max: time.Millisecond, Stable: time.Hour}})
		defer srv.Close()
		srv.Wait(context.Background())
		st := srv.Status()
		if st.State != protocol.MCPFailed || !strings.Contains(st.Error, "did not answer within its startup_timeout_s (100ms)") {
			t.Fatalf("status = %+v", st)
		}
		srv.Retry()
		time.Sleep(50 * time.Millisecond)
		if n := mem.dialCount(); n != 1 {
			t.Errorf("a server that timed out was started %d times; it waits for its entry to change", n)
		}
	})

	t.Run("a secret that is not set", func(t *testing.T) {
		s := NewServers(ServersOptions{ToolName: modelName, Launcher: Launcher{RelayPath: "/bin/false"}})
		defer s.Close()
		cfg := config(map[string]protocol.MCPServerConfig{"time": {Command: "uvx", Secrets: []string{"TIME_KEY"}}}, nil)
		s.Apply(cfg, map[string]map[string]string{"other": {"TIME_KEY": "value-of-another-server"}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Ready(ctx)
		st := s.Status()
		if len(st) != 1 || st[0].State != protocol.MCPFailed || st[0].Error == nil || !strings.Contains(*st[0].Error, "its secret TIME_KEY is not set") {
			t.Fatalf("status = %+v", st)
		}
		if strings.Contains(*st[0].Error, "value-of-another-server") {
			t.Errorf("the status shows a secret's value: %s", *st[0].Error)
		}
	})

	t.Run("a denied server", func(t *testing.T) {
		mem := &memServer{}
		s := newServers(t, func(string) Dialer { return mem.dial }, Backoff{})
		s.Apply(config(map[string]protocol.MCPServerConfig{"mem": {Command: "x"}}, map[string]protocol.Decision{"mcp.mem": protocol.Deny}), nil)
		st := s.Status()
		if len(st) != 1 || st[0].State != protocol.MCPFailed || mem.dialCount() != 0 {
			t.Errorf("a denied server: status %+v, %d starts", st, mem.dialCount())
		}
	})
}

func TestApplyRestartsOnlyWhatChanged(t *testing.T) {
	dials := map[string]*memServer{"a": {}, "b": {}}
	s := newServers(t, func(name string) Dialer { return dials[name].dial }, Backoff{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entries := map[string]protocol.MCPServerConfig{"a": {Command: "x"}, "b": {Command: "y", Secrets: []string{"K"}}}
	s.Apply(config(entries, nil), map[string]map[string]string{"b": {"K": "1"}})
	s.Ready(ctx)
	// The same config and secrets again change nothing.
	s.Apply(config(entries, nil), map[string]map[string]string{"b": {"K": "1"}})
	s.Ready(ctx)
	// A changed secret restarts that server only.
	s.Apply(config(entries, nil), map[string]map[string]string{"b": {"K": "2"}})
	s.Ready(ctx)
	if a, b := dials["a"].dialCount(), dials["b"].dialCount(); a != 1 || b != 2 {
		t.Errorf("starts: a %d (want 1), b %d (want 2)", a, b)
	}
}

func TestToolListChanged(t *testing.T) {
	mem := &memServer{}
	srv := StartServer(ServerOptions{Name: "mem", Dial: mem.dial})
	defer srv.Close()
	srv.Wait(context.Background())
	mem.mu.Lock()
	server := mem.servers[0]
	mem.mu.Unlock()
	// A tool the server adds while connected is offered from then on.
	sdk.AddTool(server, &sdk.Tool{Name: "late", Description: "Came later."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "late"}}}, nil, nil
	})
	waitFor(t, "the new tool", func() bool { return len(srv.Status().Tools) == 6 })
	if got := srv.Call(context.Background(), "late", nil); !got.OK || got.Text != "late" {
		t.Errorf("the new tool = %+v", got)
	}
}
