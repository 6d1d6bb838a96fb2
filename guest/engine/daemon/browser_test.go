package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd"
	"github.com/invisible-dots/invisible-dots/guest/engine/browser"
	"github.com/invisible-dots/invisible-dots/guest/engine/mcphost"
	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

const browserProxy = "http://bob:s3cr3t-proxy@proxy.example:3128"

// fakePlaywright stands in for @playwright/mcp, in memory: a few of its
// tools, and a record of every start's configuration and secrets.
type fakePlaywright struct {
	mu     sync.Mutex
	starts []map[string]string
	shots  int
	// closeHold, when set, holds browser_close until it is closed (a
	// browser that does not close in time).
	closeHold chan struct{}
}

type fakeArgs map[string]any

// fakePlaywrightInstructions is what the fake server says at initialize.
const fakePlaywrightInstructions = "Read the page with browser_snapshot before every action."

func (f *fakePlaywright) dial(cfg protocol.MCPServerConfig, secrets map[string]string) mcphost.Dialer {
	return func(io.Writer) (sdk.Transport, error) {
		f.mu.Lock()
		f.starts = append(f.starts, secrets)
		f.mu.Unlock()
		srv := sdk.NewServer(&sdk.Implementation{Name: "fake-playwright", Version: "1"}, &sdk.ServerOptions{Instructions: fakePlaywrightInstructions})
		text := func(s string) *sdk.CallToolResult {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
		}
		add := func(name string, answer func(fakeArgs) *sdk.CallToolResult) {
			sdk.AddTool(srv, &sdk.Tool{Name: name, Description: name + " of the fake"}, func(_ context.Context, _ *sdk.CallToolRequest, in fakeArgs) (*sdk.CallToolResult, any, error) {
				return answer(in), nil, nil
			})
		}
		add("browser_tabs", func(fakeArgs) *sdk.CallToolResult { return text("- 0: (current) [about:blank]") })
		add("browser_close", func(fakeArgs) *sdk.CallToolResult {
			if f.closeHold != nil {
				<-f.closeHold
			}
			return text("closed")
		})
		add("browser_install", func(fakeArgs) *sdk.CallToolResult { return text("installed") })
		add("browser_navigate", func(a fakeArgs) *sdk.CallToolResult { return text(fmt.Sprint("at ", a["url"])) })
		add("browser_take_screenshot", func(a fakeArgs) *sdk.CallToolResult {
			f.mu.Lock()
			f.shots++
			n := f.shots
			f.mu.Unlock()
			// Each screenshot a shade of its own, so the test tells them apart.
			img := image.NewRGBA(image.Rect(0, 0, 1600, 900))
			for x := 0; x < 20; x++ {
				for y := 0; y < 20; y++ {
					img.Set(x, y, color.RGBA{R: uint8(n * 50), A: 255})
				}
			}
			var buf bytes.Buffer
			mime := "image/png"
			if a["type"] == "jpeg" {
				jpeg.Encode(&buf, img, nil)
				mime = "image/jpeg"
			} else {
				png.Encode(&buf, img)
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("shot %d", n)}, &sdk.ImageContent{MIMEType: mime, Data: buf.Bytes()}}}
		})
		c1, c2 := net.Pipe()
		if _, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: c2, Writer: c2}, nil); err != nil {
			return nil, err
		}
		return &sdk.IOTransport{Reader: c1, Writer: c1}, nil
	}
}

func startEngineWithBrowser(t *testing.T, fp *fakePlaywright) *harness {
	t.Helper()
	h, cfg := newHarness(t, t.TempDir(), newFakeOpenRouter(t), &fakeTools{})
	cfg.AgentdBin, cfg.MCPCommand = "/bin/true", "/usr/local/bin/playwright-mcp"
	h.launch(cfg, Deps{Model: h.or.client(), Files: h.files, BrowserDial: fp.dial})
	return h
}

func TestBrowserIdentitiesThroughTheEngine(t *testing.T) {
	fp := &fakePlaywright{}
	h := startEngineWithBrowser(t, fp)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(map[string]protocol.Decision{"browser.identity.create": protocol.Ask}))

	// The routes.
	code, body := call(t, h.c, "POST", "/browser-identities", protocol.BrowserIdentityCreate{Name: "web"})
	var web protocol.BrowserIdentity
	if json.Unmarshal(body, &web); code != http.StatusCreated || web.ID == "" || web.HasProxy || web.Open {
		t.Fatalf("POST /browser-identities = %d %s", code, body)
	}
	proxy := browserProxy
	code, body = call(t, h.c, "POST", "/browser-identities", protocol.BrowserIdentityCreate{Name: "far", Proxy: &proxy})
	var far protocol.BrowserIdentity
	if json.Unmarshal(body, &far); code != http.StatusCreated || !far.HasProxy || strings.Contains(string(body), "s3cr3t") {
		t.Fatalf("POST with a proxy = %d %s", code, body)
	}
	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"POST", "/browser-identities", `{"name":"x","proxy":42}`, 400, protocol.ErrInvalid},
		{"POST", "/browser-identities", `{"name":""}`, 400, protocol.ErrInvalid},
		{"GET", "/browser-identities/nope", nil, 404, protocol.ErrNotFound},
		{"DELETE", "/browser-identities/nope", nil, 404, protocol.ErrNotFound},
		{"POST", "/browser-identities/nope/close", nil, 404, protocol.ErrNotFound},
		{"GET", "/browser-identities/" + web.ID + "/frame", nil, 409, protocol.ErrNotOpen},
	} {
		code, body := call(t, h.c, tc.method, tc.path, tc.body)
		var eb protocol.ErrorBody
		json.Unmarshal(body, &eb)
		if code != tc.status || eb.Error != tc.code || eb.Message == "" {
			t.Errorf("%s %s = %d %s, want %d %s", tc.method, tc.path, code, body, tc.status, tc.code)
		}
	}
	code, body = call(t, h.c, "GET", "/browser-identities", nil)
	var list protocol.BrowserIdentities
	if json.Unmarshal(body, &list); code != 200 || len(list.Identities) != 2 || list.Identities[0].ID != web.ID {
		t.Errorf("GET /browser-identities = %d %s", code, body)
	}

	// A page tool on a closed identity does not launch it.
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run browser_navigate {"identity_id":"` + web.ID + `","url":"https://example.com"}`})
	evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	if ans := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0]); ans.Text != "done: identity is not open; call browser_identity_launch first" {
		t.Errorf("answer = %q", ans.Text)
	}

	// The model launches, navigates and looks four times in one response:
	// its next request shows the newest three, after the last tool message.
	h.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: `run browser_identity_launch {"identity_id":"` + web.ID + `"}`})
	// Each message waits for its answer: one sent during a turn would join it.
	s.waitFor(t, "the launch's answer", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventBrowserIdentityLaunch) == 1 && countType(evs, protocol.EventMessageAssistant) >= 2
	})
	shot := `browser_take_screenshot {"identity_id":"` + web.ID + `"}`
	h.send("m3", protocol.InboundUserMessage, protocol.UserMessage{Text: "run " + shot + " " + shot + " " + shot + " " + shot})
	s.waitFor(t, "the screenshots' answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) >= 3 })
	reqs := h.or.Requests()
	after := reqs[len(reqs)-1]
	msgs := after.Messages
	last := msgs[len(msgs)-1]
	if last.Role != "user" || len(last.images()) != 3 || msgs[len(msgs)-2].Role != "tool" {
		t.Fatalf("the request after the screenshots ends with %s with %d images after %s", last.Role, len(last.images()), msgs[len(msgs)-2].Role)
	}
	for i, u := range last.images() {
		if !strings.HasPrefix(u, "data:image/png;base64,") {
			t.Errorf("image %d is %.30q, want a PNG data URL", i, u)
		}
	}
	var toolTexts []string
	for _, m := range msgs {
		if m.Role == "tool" && strings.HasPrefix(m.text(), "shot ") {
			toolTexts = append(toolTexts, m.text())
		}
	}
	if len(toolTexts) != 4 || toolTexts[3] != "shot 4\n[screenshot, 1280x720, not stored]" {
		t.Errorf("the stored results = %q, want each text with its placeholder", toolTexts)
	}
	// The three shown are the newest: shots 2, 3 and 4 (the first is left out).
	var shades []uint32
	for _, u := range last.images() {
		r, _, _, _ := decodeDataURL(t, u).At(5, 5).RGBA()
		shades = append(shades, r>>8)
	}
	if fmt.Sprint(shades) != "[100 150 200]" {
		t.Errorf("the images shown have shades %v, want shots 2, 3 and 4 (100 150 200), oldest first", shades)
	}

	// A later turn replays only the placeholders.
	h.send("m4", protocol.InboundUserMessage, protocol.UserMessage{Text: "hello again"})
	s.waitFor(t, "the fourth answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) >= 4 })
	reqs = h.or.Requests()
	for _, m := range reqs[len(reqs)-1].Messages {
		if len(m.images()) > 0 {
			t.Errorf("a later turn's request shows images again")
		}
	}

	// The frame of the open identity: a JPEG that is no use of it.
	req, _ := http.NewRequest("GET", "http://engine/browser-identities/"+web.ID+"/frame", nil)
	resp, err := h.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/jpeg" || resp.Header.Get("Cache-Control") != "no-store" || frame[0] != 0xFF {
		t.Errorf("frame = %d %s %s (%d bytes)", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"), len(frame))
	}

	// GET /tools: the page tools the server serves, under their permission;
	// browser_close and browser_install are never offered.
	_, body = call(t, h.c, "GET", "/tools", nil)
	var tl protocol.Tools
	json.Unmarshal(body, &tl)
	perms := map[string]string{}
	for _, ti := range tl.Tools {
		perms[ti.Name] = ti.Permission
		if strings.HasPrefix(ti.Name, "browser_") && !ti.Offered {
			t.Errorf("%s is not offered", ti.Name)
		}
	}
	for name, want := range map[string]string{"browser_navigate": "browser.navigate", "browser_take_screenshot": "browser.read",
		"browser_tabs": "browser.navigate", "browser_identity_launch": "browser.identity.launch", "computer_screenshot": "computer.screenshot",
		"browser_close": "", "browser_install": ""} {
		if perms[name] != want {
			t.Errorf("GET /tools: %s under %q, want %q", name, perms[name], want)
		}
	}
	_, body = call(t, h.c, "GET", "/health", nil)
	var health protocol.Health
	json.Unmarshal(body, &health)
	if health.Browser != (protocol.BrowserCounts{Identities: 2, Open: 1}) {
		t.Errorf("health browser = %+v", health.Browser)
	}

	// browser_identity_create asks here: its approval shows the proxy as ***.
	h.send("m5", protocol.InboundUserMessage, protocol.UserMessage{Text: `run browser_identity_create {"name":"p","proxy":"` + browserProxy + `"}`})
	evs = s.waitFor(t, "the approval", hasType(protocol.EventApprovalRequested))
	ar := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[0])
	if string(ar.Arguments) != `{"name":"p","proxy":"***"}` {
		t.Errorf("approval arguments = %s, want the proxy masked", ar.Arguments)
	}
	h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalApprove})
	s.waitFor(t, "the created identity", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventBrowserIdentityCreated) >= 3 && countType(evs, protocol.EventMessageAssistant) >= 5
	})

	// The conversation file keeps the call without the proxy the model gave.
	conv := ""
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if conv = h.files.Under("/home/dot/conversations/"); strings.Contains(conv, "Created browser identity") {
			break
		}
	}
	if strings.Contains(conv, "s3cr3t") || !strings.Contains(conv, "Created browser identity") {
		t.Errorf("the conversation file holds the proxy, or not the call:\n%s", conv)
	}

	// The identity with a proxy launches with it as a secret of the server:
	// of the forwarder that runs it, since it has a password.
	h.send("m6", protocol.InboundUserMessage, protocol.UserMessage{Text: `run browser_identity_launch {"identity_id":"` + far.ID + `"}`})
	s.waitFor(t, "the second launch", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventBrowserIdentityLaunch) >= 2
	})
	fp.mu.Lock()
	var proxied int
	for _, st := range fp.starts {
		if st[proxyfwd.EnvUpstream] == browserProxy {
			proxied++
		}
	}
	fp.mu.Unlock()
	if proxied != 1 {
		t.Errorf("%d starts got the proxy, want the one of %s", proxied, far.ID)
	}

	// prepare-sleep closes every open browser.
	if code, body := call(t, h.c, "POST", "/prepare-sleep", nil); code != http.StatusNoContent {
		t.Fatalf("prepare-sleep = %d %s", code, body)
	}
	evs = s.waitFor(t, "the closes", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventBrowserIdentityClosed) >= 2
	})
	for _, ev := range evs {
		if strings.Contains(string(ev.Data), "s3cr3t") {
			t.Errorf("%s holds the proxy: %s", ev.Type, ev.Data)
		}
	}
	if code, _ := call(t, h.c, "DELETE", "/browser-identities/"+web.ID, nil); code != http.StatusNoContent {
		t.Errorf("DELETE = %d", code)
	}
	s.waitFor(t, "the delete", hasType(protocol.EventBrowserIdentityDeleted))
}

func decodeDataURL(t *testing.T, u string) image.Image {
	t.Helper()
	_, b64, _ := strings.Cut(u, ",")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := image.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestPageToolApprovalAndTargetHideTheURLsUserinfo(t *testing.T) {
	tb := Toolbox{Browser: browser.New(browser.Options{})}
	args := map[string]any{"identity_id": "web-abc123", "url": "https://ann:hunter2@mail.example/inbox?q=1"}
	shown := tb.ApprovalArguments("browser_navigate", args)
	if shown["url"] != "https://mail.example/inbox?q=1" || shown["identity_id"] != "web-abc123" {
		t.Errorf("approval arguments = %v, want the URL without its user and password, its query kept", shown)
	}
	if args["url"] != "https://ann:hunter2@mail.example/inbox?q=1" {
		t.Errorf("the parked call's own URL was changed: %v", args["url"])
	}
	if got := tb.Target("browser_navigate", args); got != "web-abc123 https://mail.example/inbox?q=1" {
		t.Errorf("target = %q", got)
	}
	if got := tb.Target("browser_type", map[string]any{"identity_id": "web-abc123", "text": "my password"}); got != "web-abc123" {
		t.Errorf("browser_type's target = %q, want the identity only, never typed text", got)
	}
}

// TestBrowserServersInstructionsAreInThePrompt: what the browser's server
// says at initialize reaches the system prompt beside the browser section
// (ref 8.3), read by the probe before any identity is open.
func TestBrowserServersInstructionsAreInThePrompt(t *testing.T) {
	h := startEngineWithBrowser(t, &fakePlaywright{})
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; ; i++ {
		h.send(fmt.Sprintf("m%d", i), protocol.InboundUserMessage, protocol.UserMessage{Text: "hi"})
		s.waitFor(t, "the answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) == i })
		reqs := h.or.Requests()
		system := reqs[len(reqs)-1].Messages[0].text()
		if strings.Contains(system, "What the browser's server says of driving a page:\n"+fakePlaywrightInstructions) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the system prompt never carries the browser server's instructions:\n%s", system)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSIGTERMKillsABrowserThatDoesNotClose: on SIGTERM the open browsers get
// work.BrowserCloseOnStop to close (ref 8.7); one that does not close in time
// is killed with its server, and the engine still ends within that bound.
func TestSIGTERMKillsABrowserThatDoesNotClose(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	fp := &fakePlaywright{closeHold: hold}
	h := startEngineWithBrowser(t, fp)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	code, body := call(t, h.c, "POST", "/browser-identities", protocol.BrowserIdentityCreate{Name: "web"})
	var web protocol.BrowserIdentity
	if json.Unmarshal(body, &web); code != http.StatusCreated {
		t.Fatalf("POST /browser-identities = %d %s", code, body)
	}
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run browser_identity_launch {"identity_id":"` + web.ID + `"}`})
	s.waitFor(t, "the launch", hasType(protocol.EventBrowserIdentityLaunch))
	s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))

	began := time.Now()
	h.stop()
	h.stop = nil
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run after the stop = %v", err)
		}
	case <-time.After(work.BrowserCloseOnStop + 5*time.Second):
		t.Fatal("the engine did not end after the stop")
	}
	if took := time.Since(began); took > work.BrowserCloseOnStop+time.Second {
		t.Errorf("the engine ended %v after the stop, want within %v of the browsers' close", took, work.BrowserCloseOnStop)
	}
}
