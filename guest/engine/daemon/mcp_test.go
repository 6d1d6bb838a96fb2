package daemon

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/engine/mcphost"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

type echoArgs struct {
	Text string `json:"text"`
}

// memDial serves a small MCP server of the SDK in memory for every declared
// server: one tool, echo, that also says which secret the server was given.
func memDial(_ string, _ protocol.MCPServerConfig, secrets map[string]string) mcphost.Dialer {
	return func(io.Writer) (sdk.Transport, error) {
		srv := sdk.NewServer(&sdk.Implementation{Name: "probe", Version: "1"}, &sdk.ServerOptions{Instructions: "Echoes."})
		sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "Echo the text."}, func(_ context.Context, _ *sdk.CallToolRequest, in echoArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo " + in.Text}}}, nil, nil
		})
		c1, c2 := net.Pipe()
		if _, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: c2, Writer: c2}, nil); err != nil {
			return nil, err
		}
		return &sdk.IOTransport{Reader: c1, Writer: c1}, nil
	}
}

// startEngineWithMCP runs the engine with its own toolbox (the table and the
// declared MCP servers), the servers reached in memory.
func startEngineWithMCP(t *testing.T) *harness {
	t.Helper()
	h, cfg := newHarness(t, t.TempDir(), newFakeOpenRouter(t), &fakeTools{})
	cfg.AgentdBin = "/bin/false"
	h.launch(cfg, Deps{Model: h.or.client(), Files: h.files, MCPDial: memDial})
	return h
}

func mcpConfig(perms map[string]protocol.Decision) protocol.RuntimeConfig {
	c := testConfig(nil)
	c.MCPServers = map[string]protocol.MCPServerConfig{"probe": {Command: "probe-server", Secrets: []string{"PROBE_KEY"}}}
	c.Permissions = protocol.ResolvePermissions(perms, []string{"probe"})
	return c
}

func TestMCPServerToolsThroughTheGate(t *testing.T) {
	h := startEngineWithMCP(t)
	s := openStream(t, h.c, 0, false)
	h.configure(mcpConfig(nil))

	// Its secret is not pushed yet: the server waits for it and says so,
	// without starting.
	tools := func() protocol.Tools {
		_, body := call(t, h.c, "GET", "/tools", nil)
		var got protocol.Tools
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("GET /tools: %v: %s", err, body)
		}
		return got
	}
	got := tools()
	if len(got.MCPServers) != 1 || got.MCPServers[0].State != protocol.MCPFailed || got.MCPServers[0].Error == nil ||
		!strings.Contains(*got.MCPServers[0].Error, "PROBE_KEY is not set") {
		t.Fatalf("mcp_servers before the secret = %+v", got.MCPServers)
	}
	if code, body := call(t, h.c, "POST", "/secrets", protocol.SecretsRequest{MCPSecrets: map[string]map[string]string{"probe": {"PROBE_KEY": "probe-secret-1"}}}); code != http.StatusNoContent {
		t.Fatalf("POST /secrets = %d %s", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got = tools(); got.MCPServers[0].State != protocol.MCPConnected; got = tools() {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not connect after its secret: %+v", got.MCPServers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := cmp.Diff([]protocol.MCPServerStatus{{Name: "probe", State: protocol.MCPConnected, Tools: 1}}, got.MCPServers); d != "" {
		t.Errorf("mcp_servers (-want +got):\n%s", d)
	}
	last := got.Tools[len(got.Tools)-1]
	if last.Name != "mcp__probe__echo" || last.Permission != "mcp.probe" || !last.Offered || last.Description != "Echo the text." {
		t.Errorf("the server's tool in GET /tools = %+v, want it after the table's under mcp.probe, offered", last)
	}

	// mcp.probe asks by default: the call parks, and the approved call runs
	// once, reported as every other tool's.
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run mcp__probe__echo {"text":"hi"}`})
	evs := s.waitFor(t, "the approval", hasType(protocol.EventApprovalRequested))
	ar := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[0])
	if ar.Tool != "mcp__probe__echo" || ar.Permission != "mcp.probe" || string(ar.Arguments) != `{"text":"hi"}` {
		t.Errorf("approval.requested = %+v", ar)
	}
	h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalApprove})
	evs = s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	called := ofType(evs, protocol.EventToolCalled)
	if len(called) != 1 {
		t.Fatalf("%d tool.called, want 1: %s", len(called), describe(evs))
	}
	tc := decode[protocol.ToolCalled](t, called[0])
	if tc.Tool != "mcp__probe__echo" || tc.Permission != "mcp.probe" || tc.Decision != protocol.Ask || !tc.OK || tc.Target != nil {
		t.Errorf("tool.called = %+v, want the server's tool, mcp.probe, ask, ok, no target", tc)
	}
	ans := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0])
	if ans.Text != "done: echo hi" {
		t.Errorf("answer = %q, want the server's result back to the model", ans.Text)
	}

	// The model was offered the tool and told what the server said of itself.
	reqs := h.or.Requests()
	first := reqs[0]
	offered := false
	for _, tl := range first.Tools {
		offered = offered || tl.Function.Name == "mcp__probe__echo"
	}
	if !offered || !strings.Contains(first.Messages[0].text(), "## probe\nEchoes.") {
		t.Errorf("the request offers the server's tool: %v; the system prompt tells of the server:\n%s", offered, first.Messages[0].text())
	}

	// Denied, the server is not started and its tools are not offered.
	h.configure(mcpConfig(map[string]protocol.Decision{"mcp.probe": protocol.Deny}))
	got = tools()
	if got.MCPServers[0].State != protocol.MCPFailed || strings.HasPrefix(got.Tools[len(got.Tools)-1].Name, "mcp__") {
		t.Errorf("a denied server: %+v, last tool %+v", got.MCPServers, got.Tools[len(got.Tools)-1])
	}
}

func TestAddMCPServerAsksAndReportsTheAddition(t *testing.T) {
	h := startEngineWithMCP(t)
	s := openStream(t, h.c, 0, false)
	h.configure(mcpConfig(nil))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run add_mcp_server {"name":"time","command":"uvx","args":["mcp-server-time"],"reason":"to tell the time"}`})
	evs := s.waitFor(t, "the approval", hasType(protocol.EventApprovalRequested))
	ar := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[0])
	if ar.Tool != "add_mcp_server" || ar.Permission != "mcp.servers.add" {
		t.Errorf("approval.requested = %+v", ar)
	}
	if n := countType(evs, protocol.EventMCPServerAdded); n != 0 {
		t.Errorf("mcp.server.added before the approval")
	}
	h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalApprove})
	evs = s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	added := ofType(evs, protocol.EventMCPServerAdded)
	if len(added) != 1 {
		t.Fatalf("%d mcp.server.added, want 1: %s", len(added), describe(evs))
	}
	var args, want any
	json.Unmarshal(decode[protocol.MCPServerAdded](t, added[0]).Arguments, &args)
	json.Unmarshal(ar.Arguments, &want)
	if d := cmp.Diff(want, args); d != "" {
		t.Errorf("mcp.server.added carries other arguments than the approval (-approval +event):\n%s", d)
	}
	tc := decode[protocol.ToolCalled](t, ofType(evs, protocol.EventToolCalled)[0])
	if tc.Tool != "add_mcp_server" || !tc.OK || tc.Target == nil || *tc.Target != "time" {
		t.Errorf("tool.called = %+v", tc)
	}
}

// TestClearedMCPSecretsReachTheServer: a push whose mcp_secrets is an empty
// map clears the secrets the engine holds, and the server that named one is
// started again without it (ref 4.3: a revoked secret is no longer in use).
func TestClearedMCPSecretsReachTheServer(t *testing.T) {
	var mu sync.Mutex
	var dialed []map[string]string
	dial := func(name string, cfg protocol.MCPServerConfig, secrets map[string]string) mcphost.Dialer {
		mu.Lock()
		dialed = append(dialed, maps.Clone(secrets))
		mu.Unlock()
		return memDial(name, cfg, secrets)
	}
	last := func() (int, map[string]string) {
		mu.Lock()
		defer mu.Unlock()
		if len(dialed) == 0 {
			return 0, nil
		}
		return len(dialed), dialed[len(dialed)-1]
	}
	h, cfg := newHarness(t, t.TempDir(), newFakeOpenRouter(t), &fakeTools{})
	cfg.AgentdBin = "/bin/false"
	h.launch(cfg, Deps{Model: h.or.client(), Files: h.files, MCPDial: dial})
	h.configure(mcpConfig(nil))
	push := func(secrets map[string]map[string]string) {
		t.Helper()
		if code, body := call(t, h.c, "POST", "/secrets", protocol.SecretsRequest{MCPSecrets: secrets}); code != http.StatusNoContent {
			t.Fatalf("POST /secrets %v = %d %s", secrets, code, body)
		}
	}
	waitDial := func(what string, pred func(map[string]string) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, got := last()
			if n > 0 && pred(got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server was never started %s; last dial had %v", what, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	push(map[string]map[string]string{"probe": {"PROBE_KEY": "probe-secret-1"}})
	waitDial("with its secret", func(s map[string]string) bool { return s["PROBE_KEY"] == "probe-secret-1" })
	// The raw body the host sends when the Secret holds none any more.
	if code, body := call(t, h.c, "POST", "/secrets", `{"openrouter_api_key":"sk-or-test-key-123","mcp_secrets":{}}`); code != http.StatusNoContent {
		t.Fatalf("POST /secrets with mcp_secrets {} = %d %s", code, body)
	}
	// The server that named it is stopped and says why: it is not started
	// again until a secret is pushed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := call(t, h.c, "GET", "/tools", nil)
		var tools struct {
			MCPServers []protocol.MCPServerStatus `json:"mcp_servers"`
		}
		json.Unmarshal(body, &tools)
		if code == 200 && len(tools.MCPServers) == 1 && tools.MCPServers[0].State == protocol.MCPFailed &&
			tools.MCPServers[0].Error != nil && strings.Contains(*tools.MCPServers[0].Error, "PROBE_KEY") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /tools after the secret was cleared = %d %s, want probe not started for want of PROBE_KEY", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, got := last(); got["PROBE_KEY"] != "probe-secret-1" || n != 1 {
		t.Errorf("dials = %d, last %v: the server was started again with a revoked secret", n, got)
	}
}
