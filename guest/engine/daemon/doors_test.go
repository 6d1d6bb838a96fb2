package daemon

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/engine/api"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestBodiesAreReadStrictlyWithTheRoutesCode(t *testing.T) {
	h := startEngine(t, t.TempDir(), nil, nil)
	cfg := `{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{},"limits":%s}`
	big := `{"openrouter_api_key":"` + strings.Repeat("k", 5<<20) + `"}`
	tests := map[string]struct {
		reason       string
		method, path string
		body         string
		wantCode     int
		wantIn       string
		wantAllow    string
	}{
		"secrets, trailing value":      {"one JSON value a body", "POST", "/secrets", `{"openrouter_api_key":"sk-or-1"} {"openrouter_api_key":"sk-or-2"}`, 400, `"error":"invalid_secret"`, ""},
		"secrets, over 4 MiB":          {"the route's own code for a body too large", "POST", "/secrets", big, 400, `"error":"invalid_secret"`, ""},
		"secrets, unknown field":       {"a misspelt field", "POST", "/secrets", `{"openrouter_api_key":"sk-or-1","mcp_secret":{}}`, 400, `"error":"invalid_secret"`, ""},
		"secrets, key in another case": {"keys are matched exactly", "POST", "/secrets", `{"OpenRouter_API_Key":"sk-or-1"}`, 400, `"error":"invalid_secret"`, ""},
		"config, key in another case":  {"keys are matched exactly, at every depth", "PUT", "/config", `{"name":"x","model":{"provider":"openrouter","ID":"m"},"permissions":{},"limits":{}}`, 400, `"error":"invalid_config"`, ""},
		"events, key in another case":  {"keys are matched exactly", "POST", "/events", `{"id":"e1","Type":"message.user","ts":"2026-11-30T12:00:00Z","data":{"text":"hi"}}`, 400, `"error":"invalid"`, ""},
		"secrets, MCP alone":           {"ref 4.3: the MCP secrets travel in the same route", "POST", "/secrets", `{"mcp_secrets":{"search":{"TOKEN":"abcd-1234"}}}`, 204, ``, ""},
		"secrets, nothing":             {"a body that sets nothing", "POST", "/secrets", `{}`, 400, `"error":"invalid_secret"`, ""},
		"config, trailing value":       {"one JSON value a body", "PUT", "/config", fmt.Sprintf(cfg, `{}`) + `]`, 400, `"error":"invalid_config"`, ""},
		"config, over 4 MiB":           {"the route's own code for a body too large", "PUT", "/config", fmt.Sprintf(cfg, `{}`) + strings.Repeat(" ", 5<<20), 400, `"error":"invalid_config"`, ""},
		"config, zero steps":           {"an explicit zero is refused, not made the default", "PUT", "/config", fmt.Sprintf(cfg, `{"max_steps_per_task":0}`), 400, `max_steps_per_task 0`, ""},
		"config, zero cost":            {"an explicit zero is refused, not made the default", "PUT", "/config", fmt.Sprintf(cfg, `{"max_cost_per_task_usd":0}`), 400, `max_cost_per_task_usd 0`, ""},
		"config, limits left out":      {"a limit left out takes its default", "PUT", "/config", fmt.Sprintf(cfg, `{}`), 204, ``, ""},
		"config, control in model id": {"no control character in a model id", "PUT", "/config",
			`{"name":"x","model":{"provider":"openrouter","id":"m\u0007x"},"permissions":{},"limits":{}}`, 400, `model.id holds a control character`, ""},
		"config, control in env name": {"an env name is a name", "PUT", "/config",
			`{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{},"limits":{},"mcp_servers":{"s":{"command":"c","env":{"A\nB":"v"}}}}`, 400, `is not an environment variable name`, ""},
		"config, control in header name": {"a header name is a token", "PUT", "/config",
			`{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{},"limits":{},"mcp_servers":{"s":{"url":"https://x","headers":{"X-A\r\nB":"v"}}}}`, 400, `is not an HTTP header name`, ""},
		"events, trailing value": {"one JSON value a body", "POST", "/events", `{"id":"e1","type":"message.user","ts":"2026-11-30T12:00:00Z","data":{"text":"hi"}}x`, 400, `"error":"invalid"`, ""},
		"POST on health":         {"405 with Allow", "POST", "/health", ``, 405, `"error":"method_not_allowed"`, "GET, HEAD"},
		"GET on secrets":         {"405 with Allow", "GET", "/secrets", ``, 405, `"error":"method_not_allowed"`, "POST"},
		"unknown path":           {"still 404", "GET", "/nothing", ``, 404, `"error":"not_found"`, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "http://engine"+tc.path, strings.NewReader(tc.body))
			resp, err := h.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			if resp.StatusCode != tc.wantCode || !strings.Contains(b.String(), tc.wantIn) || resp.Header.Get("Allow") != tc.wantAllow {
				t.Errorf("%s\n%s %s = %d %s Allow %q\nwant %d with %s Allow %q", tc.reason, tc.method, tc.path, resp.StatusCode, b.String(), resp.Header.Get("Allow"), tc.wantCode, tc.wantIn, tc.wantAllow)
			}
		})
	}
}

func TestMCPSecretsAreKeptAndMasked(t *testing.T) {
	h := startEngine(t, t.TempDir(), nil, nil)
	h.configure(testConfig(nil))
	if code, body := call(t, h.c, "POST", "/secrets", protocol.SecretsRequest{MCPSecrets: map[string]map[string]string{"search": {"TOKEN": "mcp-secret-value-42"}}}); code != 204 {
		t.Fatalf("POST /secrets with the MCP secrets alone = %d %s", code, body)
	}
	s := openStream(t, h.c, 0, false)
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "my token is mcp-secret-value-42"})
	s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	deadline := time.Now().Add(5 * time.Second)
	for {
		var chat string
		for p := range h.files.files {
			if strings.HasPrefix(p, "/home/dot/conversations/chat/") {
				chat = h.files.Get(p)
			}
		}
		if strings.Contains(chat, "my token is") {
			if strings.Contains(chat, "mcp-secret-value-42") {
				t.Errorf("the conversation file shows an MCP secret:\n%s", chat)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no conversation file with the message: %q", chat)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The key pushed before is kept: the engine still answers.
	if code, body := call(t, h.c, "GET", "/health", nil); code != 200 || !strings.Contains(string(body), `"openrouter_configured":true`) {
		t.Errorf("health after the MCP secrets alone = %d %s", code, body)
	}
}

func TestCursorAheadOfTheOutbox(t *testing.T) {
	h := startEngine(t, t.TempDir(), nil, nil)
	// A host whose log holds 120 events of this Dot, from a database the
	// guest lost: the stream says so first, then goes on above 120.
	s := openStream(t, h.c, 120, false)
	evs := s.waitFor(t, "the reset", hasType(protocol.EventOutboxReset))
	reset := ofType(evs, protocol.EventOutboxReset)[0]
	got := decode[protocol.OutboxReset](t, reset)
	if reset.Seq != 121 || got.Cursor != 120 || got.LastSeq < 1 || got.LastSeq >= 120 {
		t.Errorf("reset = seq %d %+v, want seq 121, cursor 120 and the outbox's last seq", reset.Seq, got)
	}
	if _, err := protocol.ParseOutbound(reset); err != nil {
		t.Errorf("the reset does not parse as the host parses it: %v", err)
	}
	h.configure(testConfig(nil))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "hello"})
	evs = s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	for _, e := range evs {
		if e.Seq <= 120 {
			t.Errorf("event %s has seq %d, under the host's cursor", e.Type, e.Seq)
		}
	}
	// A second stream at the same cursor finds nothing to reset.
	s2 := openStream(t, h.c, 121, false)
	evs = s2.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	if len(ofType(evs, protocol.EventOutboxReset)) != 0 {
		t.Errorf("a cursor the outbox reached reset it again")
	}
}

// asNobody runs fn on a thread whose effective user is nobody (the model's
// user of the harness), so the connections it opens carry that peer.
func asNobody(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("connecting as another user needs root")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), 65534, ^uintptr(0)); e != 0 {
			t.Errorf("seteuid nobody: %v", e)
			return
		}
		fn()
	}()
	<-done
}

func TestModelUserCannotDelayTheEnginesSocket(t *testing.T) {
	dir := t.TempDir()
	h := startEngine(t, dir, nil, nil)
	// Let nobody reach the socket: the walls of ref 4.1 are not what this
	// test is about (the peer check is).
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	os.Chmod(h.sock, 0o666)
	var held []net.Conn
	asNobody(t, func() {
		for range 20 {
			c, err := net.Dial("unix", h.sock)
			if err != nil {
				t.Errorf("dial as nobody: %v", err)
				return
			}
			held = append(held, c) // silent: the refusal waits for a head
		}
	})
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	start := time.Now()
	code, _ := call(t, h.c, "GET", "/state", nil)
	if d := time.Since(start); code != 200 || d > 500*time.Millisecond {
		t.Errorf("GET /state behind 20 silent connections of the model's user = %d in %v, want 200 at once", code, d)
	}
}

func TestEnginesSocketClosesSilentConnections(t *testing.T) {
	h := startEngine(t, t.TempDir(), nil, nil)
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("GET /state HTTP/1.1\r\n")) // half a head, never finished
	within := api.HeaderTimeout + 2*time.Second
	c.SetReadDeadline(time.Now().Add(within))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("a connection that never finishes its head is still open after %v: %v", within, err)
	}
}
