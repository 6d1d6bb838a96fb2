package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd"
	"github.com/invisible-dots/invisible-dots/guest/engine/browser/exitplace"
	"github.com/invisible-dots/invisible-dots/guest/engine/mcphost"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

const (
	secretProxy = "socks5://alice:pa55word@proxy.example:1080"
	forwarder   = "/opt/invisible-dots/bin/dot-agentd"
)

// fakeServer stands in for @playwright/mcp: an SDK server in memory with a
// few of its tools, recording how each start was configured and what was
// called. browser_take_screenshot answers a JPEG (or a PNG when asked for a
// PNG), browser_wait_for blocks until release is closed.
type fakeServer struct {
	mu      sync.Mutex
	starts  []fakeStart
	calls   []string
	release chan struct{}
	pngOnly bool
	// failStarts is how many of the next starts fail, as a server that
	// does not come up would.
	failStarts int
	// onPress runs inside browser_press_key (a browser that dies during a
	// call, which the real server would answer from a new, blank one).
	onPress func()
	// closeHold, when set, holds browser_close until it is closed (a
	// browser that does not close in time).
	closeHold chan struct{}
	// ended counts the servers the engine ended (endingConn).
	ended int
}

type fakeStart struct {
	cfg     protocol.MCPServerConfig
	secrets map[string]string
}

type anyArgs map[string]any

func (f *fakeServer) dial(cfg protocol.MCPServerConfig, secrets map[string]string) mcphost.Dialer {
	return func(io.Writer) (sdk.Transport, error) {
		f.mu.Lock()
		f.starts = append(f.starts, fakeStart{cfg, secrets})
		fail := f.failStarts > 0
		if fail {
			f.failStarts--
		}
		f.mu.Unlock()
		if fail {
			return nil, errors.New("the server did not come up")
		}
		srv := sdk.NewServer(&sdk.Implementation{Name: "fake-playwright", Version: "1"}, nil)
		tool := func(name string, answer func(anyArgs) *sdk.CallToolResult) {
			sdk.AddTool(srv, &sdk.Tool{Name: name, Description: name + " of the fake"}, func(_ context.Context, _ *sdk.CallToolRequest, in anyArgs) (*sdk.CallToolResult, any, error) {
				f.mu.Lock()
				f.calls = append(f.calls, name)
				f.mu.Unlock()
				return answer(in), nil, nil
			})
		}
		text := func(s string) *sdk.CallToolResult {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
		}
		tool("browser_tabs", func(anyArgs) *sdk.CallToolResult { return text("- 0: (current) [about:blank]") })
		tool("browser_close", func(anyArgs) *sdk.CallToolResult {
			f.mu.Lock()
			hold := f.closeHold
			f.mu.Unlock()
			if hold != nil {
				<-hold
			}
			return text("closed")
		})
		tool("browser_navigate", func(a anyArgs) *sdk.CallToolResult { return text("navigated to " + a["url"].(string)) })
		tool("browser_run_code_unsafe", func(anyArgs) *sdk.CallToolResult { return text("ran") })
		tool("browser_press_key", func(anyArgs) *sdk.CallToolResult {
			f.mu.Lock()
			on := f.onPress
			f.mu.Unlock()
			if on != nil {
				on()
			}
			return text("pressed on about:blank")
		})
		tool("browser_wait_for", func(anyArgs) *sdk.CallToolResult {
			f.mu.Lock()
			ch := f.release
			f.mu.Unlock()
			if ch != nil {
				<-ch
			}
			return text("waited")
		})
		tool("browser_take_screenshot", func(a anyArgs) *sdk.CallToolResult {
			var buf bytes.Buffer
			img := image.NewRGBA(image.Rect(0, 0, 1280, 720))
			mime := "image/png"
			f.mu.Lock()
			pngOnly := f.pngOnly
			f.mu.Unlock()
			if a["type"] == "jpeg" && !pngOnly {
				jpeg.Encode(&buf, img, nil)
				mime = "image/jpeg"
			} else {
				png.Encode(&buf, img)
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "Took the viewport screenshot"}, &sdk.ImageContent{MIMEType: mime, Data: buf.Bytes()}}}
		})
		c1, c2 := net.Pipe()
		// browser_hover stands for a browser that dies under a call: the
		// server's end of the connection goes away.
		tool("browser_hover", func(anyArgs) *sdk.CallToolResult { c2.Close(); return text("unreachable") })
		if _, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: c2, Writer: c2}, nil); err != nil {
			return nil, err
		}
		end := &endingConn{Conn: c1, f: f}
		return &sdk.IOTransport{Reader: end, Writer: end}, nil
	}
}

// endingConn is the engine's end of a fake server's connection: closing it
// is the server ended (the relay's input closed, then the process killed).
type endingConn struct {
	net.Conn
	f    *fakeServer
	once sync.Once
}

func (c *endingConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		c.f.ended++
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}

func (f *fakeServer) endedServers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended
}

func (f *fakeServer) count(tool string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == tool {
			n++
		}
	}
	return n
}

// fakeChromium stands in for the Chromium a launch opened: the test ends it
// with kill.
type fakeChromium struct {
	profile string
	dead    chan struct{}
	once    sync.Once
}

func (p *fakeChromium) Done() <-chan struct{} { return p.dead }
func (p *fakeChromium) Close()                {}
func (p *fakeChromium) kill()                 { p.once.Do(func() { close(p.dead) }) }
func (p *fakeChromium) Alive() bool {
	select {
	case <-p.dead:
		return false
	default:
		return true
	}
}

type rig struct {
	m       *Manager
	st      *store.Store
	fake    *fakeServer
	removed []string

	mu       sync.Mutex
	browsers []*fakeChromium // one per launch, in order
}

// browser is the fake Chromium of the i-th launch.
func (r *rig) browser(i int) *fakeChromium {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.browsers[i]
}

func newRig(t *testing.T) *rig {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &rig{st: st, fake: &fakeServer{}}
	r.m = New(Options{
		Store: st, Command: "/usr/local/bin/playwright-mcp", Forwarder: forwarder, Home: "/home/dot", Dial: r.fake.dial,
		Remove:    func(_ context.Context, dir string) error { r.removed = append(r.removed, dir); return nil },
		Offered:   func(name string) bool { return name != "browser_run_code_unsafe" && name != "browser_close" },
		FrameWait: 200 * time.Millisecond,
		Watch: func(_ context.Context, profile string) (Process, error) {
			p := &fakeChromium{profile: profile, dead: make(chan struct{})}
			r.mu.Lock()
			r.browsers = append(r.browsers, p)
			r.mu.Unlock()
			return p, nil
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	t.Cleanup(func() { r.m.CloseAll(context.Background()) })
	return r
}

func (r *rig) events(t *testing.T) []protocol.OutboundEvent {
	t.Helper()
	evs, err := r.st.EventsAfter(context.Background(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// browserEvents are the browser.identity.* events as "type id".
func (r *rig) browserEvents(t *testing.T) []string {
	var out []string
	for _, ev := range r.events(t) {
		if strings.HasPrefix(ev.Type, "browser.identity.") {
			var d protocol.BrowserIdentityEvent
			json.Unmarshal(ev.Data, &d)
			line := strings.TrimPrefix(ev.Type, "browser.identity.") + " " + d.Name
			if d.Reason != nil {
				line += " (" + *d.Reason + ")"
			}
			out = append(out, line)
		}
	}
	return out
}

func codeOf(err error) string {
	var be *Error
	if errors.As(err, &be) {
		return be.Code
	}
	return ""
}

func (r *rig) create(t *testing.T, name string, proxy *string) protocol.BrowserIdentity {
	t.Helper()
	bi, err := r.m.Create(context.Background(), name, proxy)
	if err != nil {
		t.Fatalf("Create(%q) = %v", name, err)
	}
	return bi
}

func TestCreateListAndLimits(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	blank := "  "
	a := r.create(t, "Shopping & Co!", nil)
	b := r.create(t, "work", &blank)
	proxy := secretProxy
	c := r.create(t, "elsewhere", &proxy)
	if !strings.HasPrefix(a.ID, "shopping-co-") || len(a.ID) != len("shopping-co-")+idSuffixLen || a.Open || a.HasProxy || a.LastUsedAtMS != nil {
		t.Errorf("created = %+v, want the name's slug and a short suffix, closed, no proxy", a)
	}
	if b.HasProxy || !c.HasProxy {
		t.Errorf("a blank proxy is none (%v); a string is kept (%v)", b.HasProxy, c.HasProxy)
	}
	list, err := r.m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]protocol.BrowserIdentity{a, b, c}, list); d != "" {
		t.Errorf("List, oldest first (-want +got):\n%s", d)
	}
	for name, tc := range map[string]struct {
		name string
		code string
	}{
		"empty":     {"  ", protocol.ErrInvalid},
		"too long":  {strings.Repeat("x", protocol.BrowserNameMaxLen+1), protocol.ErrInvalid},
		"two lines": {"a\nb", protocol.ErrInvalid},
	} {
		if _, err := r.m.Create(ctx, tc.name, nil); codeOf(err) != tc.code {
			t.Errorf("%s: Create = %v, want %s", name, err, tc.code)
		}
	}
	for i := len(list); i < protocol.BrowserMaxIdentities; i++ {
		r.create(t, "more", nil)
	}
	if _, err := r.m.Create(ctx, "one too many", nil); codeOf(err) != protocol.ErrLimit {
		t.Errorf("the 21st identity: %v, want limit", err)
	}
	if _, err := r.m.Get(ctx, "nope"); codeOf(err) != protocol.ErrNotFound {
		t.Errorf("Get of an unknown id = %v, want not_found", err)
	}
	if got := r.m.Counts(ctx); got != (protocol.BrowserCounts{Identities: protocol.BrowserMaxIdentities}) {
		t.Errorf("Counts = %+v", got)
	}
}

func TestLaunchCallCloseAndTheLeastRecentlyUsed(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	proxy := secretProxy
	ids := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d"} {
		var p *string
		if n == "a" {
			p = &proxy
		}
		ids[n] = r.create(t, n, p).ID
	}
	call := func(tool string, args map[string]any) Result { return r.m.Call(ctx, tool, args) }

	if res := call("browser_navigate", map[string]any{"identity_id": ids["a"], "url": "https://example.com"}); res.OK || res.Text != notOpenText {
		t.Errorf("a page tool before the launch = %+v, want %q", res, notOpenText)
	}
	if res := call("browser_navigate", map[string]any{"identity_id": "nope", "url": "https://example.com"}); res.OK || !strings.Contains(res.Text, "no browser identity") {
		t.Errorf("a page tool on an unknown identity = %+v", res)
	}
	if r.fake.count("browser_navigate") != 0 || len(r.fake.starts) != 0 {
		t.Fatalf("a page tool launched a browser: %d starts", len(r.fake.starts))
	}

	for _, n := range []string{"a", "b", "c"} {
		if _, err := r.m.Launch(ctx, ids[n]); err != nil {
			t.Fatalf("Launch(%s) = %v", n, err)
		}
	}
	// How a start is configured: the profile of the identity, headed on the
	// desktop; a's proxy (with a password) only as a named secret of the
	// forwarder that runs its server.
	first := r.fake.starts[0]
	dir := "/home/dot/browsers/" + ids["a"]
	wantArgs := []string{"--user-data-dir", dir + "/profile", "--output-dir", dir + "/output", "--output-max-size", "67108864", "--viewport-size", "1280x720", "--image-responses", "allow"}
	if d := cmp.Diff(protocol.MCPServerConfig{Command: forwarder,
		Args:    append([]string{"proxy-forward", "--as", EnvProxy, "--", "/usr/local/bin/playwright-mcp"}, wantArgs...),
		Env:     map[string]string{"DISPLAY": ":0"},
		Secrets: []string{proxyfwd.EnvUpstream}}, first.cfg); d != "" {
		t.Errorf("the server of a (-want +got):\n%s", d)
	}
	if first.secrets[proxyfwd.EnvUpstream] != secretProxy || len(r.fake.starts[1].cfg.Secrets) != 0 || len(r.fake.starts[1].secrets) != 0 ||
		r.fake.starts[1].cfg.Command != "/usr/local/bin/playwright-mcp" {
		t.Errorf("the proxy goes as the secret %s of a only: %v / %v", proxyfwd.EnvUpstream, first.secrets, r.fake.starts[1].secrets)
	}
	if r.fake.count("browser_tabs") != 3 {
		t.Errorf("each launch opens its window with browser_tabs: %d calls", r.fake.count("browser_tabs"))
	}

	if res := call("browser_navigate", map[string]any{"identity_id": ids["a"], "url": "https://example.com/"}); !res.OK || res.Text != "navigated to https://example.com/" {
		t.Errorf("navigate on an open identity = %+v", res)
	}
	for _, u := range []string{"file:///etc/passwd", "javascript:alert(1)", "about:config", "data:text/html,x"} {
		if res := call("browser_navigate", map[string]any{"identity_id": ids["a"], "url": u}); res.OK || !strings.Contains(res.Text, "http:// and https:// pages only") {
			t.Errorf("navigate to %s = %+v, want refused before the server", u, res)
		}
	}
	if r.fake.count("browser_navigate") != 1 {
		t.Errorf("the server saw %d navigations, want the one http one", r.fake.count("browser_navigate"))
	}
	shot := call("browser_take_screenshot", map[string]any{"identity_id": ids["b"]})
	if !shot.OK || shot.Text != "Took the viewport screenshot\n[screenshot, 1280x720, not stored]" || len(shot.ImageURLs) != 1 {
		t.Errorf("a screenshot = %q (%d images), want its placeholder and one image", shot.Text, len(shot.ImageURLs))
	}

	// a and b were used after c, so launching d closes c.
	text, err := r.m.Launch(ctx, ids["d"])
	if err != nil || !strings.Contains(text, ids["c"]+" (c) was closed to make room") {
		t.Fatalf("Launch(d) = %q, %v; want c closed", text, err)
	}
	open := map[string]bool{}
	list, _ := r.m.List(ctx)
	for _, bi := range list {
		open[bi.Name] = bi.Open
	}
	if d := cmp.Diff(map[string]bool{"a": true, "b": true, "c": false, "d": true}, open); d != "" {
		t.Errorf("open after the fourth launch (-want +got):\n%s", d)
	}
	if r.fake.count("browser_close") != 1 {
		t.Errorf("the closed browser was asked to close %d times, want 1", r.fake.count("browser_close"))
	}
	if got := r.m.Counts(ctx); got != (protocol.BrowserCounts{Identities: 4, Open: 3}) {
		t.Errorf("Counts = %+v", got)
	}

	// A close keeps the profile; a delete removes it, as dot.
	if err := r.m.Close(ctx, ids["a"]); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Close(ctx, ids["a"]); err != nil {
		t.Errorf("closing a closed identity = %v, want nothing", err)
	}
	if err := r.m.Delete(ctx, ids["b"]); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"/home/dot/browsers/" + ids["b"]}, r.removed); d != "" {
		t.Errorf("removed (-want +got):\n%s", d)
	}
	if err := r.m.Delete(ctx, ids["b"]); codeOf(err) != protocol.ErrNotFound {
		t.Errorf("deleting again = %v, want not_found", err)
	}
	r.m.CloseAll(ctx)
	if got := r.m.Counts(ctx); got.Open != 0 {
		t.Errorf("open after CloseAll = %d", got.Open)
	}
	want := []string{"created a", "created b", "created c", "created d", "launched a", "launched b", "launched c",
		"closed c", "launched d", "closed a", "closed b", "deleted b", "closed d"}
	if d := cmp.Diff(want, r.browserEvents(t)); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	// The proxy is nowhere but the server's environment.
	for _, ev := range r.events(t) {
		if strings.Contains(string(ev.Data), "pa55word") {
			t.Errorf("event %s holds the proxy: %s", ev.Type, ev.Data)
		}
	}
	list, _ = r.m.List(ctx)
	b, _ := json.Marshal(list)
	if strings.Contains(string(b), "pa55word") || strings.Contains(text, "pa55word") {
		t.Errorf("the list or a launch says the proxy: %s", b)
	}
}

// TestAProxyWithCredentialsGoesThroughTheForwarder: a proxy Chromium can use
// as it is goes to the server as before; one with a user and password, in
// any scheme the forwarder speaks, goes to the forwarder only.
func TestAProxyWithCredentialsGoesThroughTheForwarder(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for i, tc := range []struct {
		proxy, command, secret string
	}{
		{"socks5://proxy.example:1080", "/usr/local/bin/playwright-mcp", EnvProxy},
		{"http://proxy.example:3128", "/usr/local/bin/playwright-mcp", EnvProxy},
		{"socks5://alice:pa55word@proxy.example:1080", forwarder, proxyfwd.EnvUpstream},
		{"http://alice:pa55word@proxy.example:3128", forwarder, proxyfwd.EnvUpstream},
		{"https://alice:pa55word@proxy.example", forwarder, proxyfwd.EnvUpstream},
	} {
		p := tc.proxy
		id := r.create(t, fmt.Sprintf("p%d", i), &p).ID
		if _, err := r.m.Launch(ctx, id); err != nil {
			t.Fatalf("%s: %v", tc.proxy, err)
		}
		st := r.fake.starts[len(r.fake.starts)-1]
		if st.cfg.Command != tc.command || !slices.Equal(st.cfg.Secrets, []string{tc.secret}) || st.secrets[tc.secret] != tc.proxy || len(st.secrets) != 1 {
			t.Errorf("%s: started %s with secrets %v", tc.proxy, st.cfg.Command, st.cfg.Secrets)
		}
		if strings.Contains(strings.Join(st.cfg.Args, " "), "pa55word") {
			t.Errorf("%s: the password is on the command line: %v", tc.proxy, st.cfg.Args)
		}
		r.m.Close(ctx, id)
	}
	r.m.o.Forwarder = ""
	p := secretProxy
	id := r.create(t, "no forwarder", &p).ID
	if _, err := r.m.Launch(ctx, id); codeOf(err) != protocol.ErrLaunchFailed || strings.Contains(err.Error(), "pa55word") {
		t.Errorf("a proxy with a password and no forwarder: %v, want launch_failed without the password", err)
	}
}

func TestFrame(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.create(t, "watched", nil).ID
	if _, err := r.m.Frame(ctx, id); codeOf(err) != protocol.ErrNotOpen {
		t.Errorf("frame of a closed identity = %v, want not_open", err)
	}
	if _, err := r.m.Frame(ctx, "nope"); codeOf(err) != protocol.ErrNotFound {
		t.Errorf("frame of an unknown identity = %v, want not_found", err)
	}
	if _, err := r.m.Launch(ctx, id); err != nil {
		t.Fatal(err)
	}
	before, _ := r.m.Get(ctx, id)
	frame, err := r.m.Frame(ctx, id)
	if err != nil || len(frame) < 3 || frame[0] != 0xFF || frame[1] != 0xD8 {
		t.Fatalf("frame = %d bytes, %v; want a JPEG", len(frame), err)
	}
	after, _ := r.m.Get(ctx, id)
	if *before.LastUsedAtMS != *after.LastUsedAtMS {
		t.Errorf("a frame moved last_used_at_ms from %d to %d", *before.LastUsedAtMS, *after.LastUsedAtMS)
	}

	// A call that holds the identity longer than the frame's wait: busy.
	r.fake.mu.Lock()
	r.fake.release = make(chan struct{})
	r.fake.mu.Unlock()
	done := make(chan Result)
	go func() { done <- r.m.Call(ctx, "browser_wait_for", map[string]any{"identity_id": id, "time": 10}) }()
	deadline := time.Now().Add(5 * time.Second)
	for r.fake.count("browser_wait_for") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := r.m.Frame(ctx, id); codeOf(err) != protocol.ErrBusy {
		t.Errorf("frame while a call holds the identity = %v, want busy", err)
	}
	close(r.fake.release)
	if res := <-done; !res.OK {
		t.Errorf("the held call = %+v", res)
	}

	r.fake.mu.Lock()
	r.fake.pngOnly = true
	r.fake.mu.Unlock()
	if _, err := r.m.Frame(ctx, id); codeOf(err) != protocol.ErrFrameFailed {
		t.Errorf("a frame that is not a JPEG = %v, want frame_failed", err)
	}
}

func TestPageToolsOffered(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if len(r.m.Tools()) != 0 {
		t.Errorf("tools before the server was read: %v", r.m.Tools())
	}
	if err := r.m.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range r.m.Tools() {
		names = append(names, tl.Name)
		var sch struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		json.Unmarshal(tl.InputSchema, &sch)
		if sch.Properties["identity_id"] == nil || !slices.Contains(sch.Required, "identity_id") {
			t.Errorf("%s: identity_id is not a required argument: %s", tl.Name, tl.InputSchema)
		}
	}
	slices.Sort(names)
	if d := cmp.Diff([]string{"browser_hover", "browser_navigate", "browser_press_key", "browser_tabs", "browser_take_screenshot", "browser_wait_for"}, names); d != "" {
		t.Errorf("offered page tools (-want +got):\n%s", d)
	}
	if r.fake.starts[0].cfg.Args[0] != "--isolated" {
		t.Errorf("the probe keeps its profile in memory: %v", r.fake.starts[0].cfg.Args)
	}
	if _, err := r.m.Validate("browser_navigate", json.RawMessage(`{"url":"https://x"}`)); err == nil || !strings.Contains(err.Error(), "identity_id") {
		t.Errorf("Validate without identity_id = %v", err)
	}
	if _, err := r.m.Validate("browser_run_code_unsafe", json.RawMessage(`{"identity_id":"x"}`)); err == nil {
		t.Errorf("a tool that is not offered validated")
	}
	if a, err := r.m.Validate("browser_navigate", json.RawMessage(`{"url":"https://x","identity_id":"i"}`)); err != nil || a["identity_id"] != "i" {
		t.Errorf("Validate = %v, %v", a, err)
	}
}

func TestIdentityTools(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	res := r.m.IdentityTool(ctx, "browser_identity_create", map[string]any{"name": "mail", "proxy": secretProxy})
	if !res.OK || strings.Contains(res.Text, "pa55word") {
		t.Fatalf("create = %+v", res)
	}
	list := r.m.IdentityTool(ctx, "browser_identity_list", map[string]any{})
	var got struct {
		Identities []struct {
			ID       string `json:"identity_id"`
			Status   string `json:"status"`
			HasProxy bool   `json:"has_proxy"`
		} `json:"identities"`
		MaxOpen int `json:"max_open"`
	}
	if err := json.Unmarshal([]byte(list.Text), &got); err != nil || len(got.Identities) != 1 || got.MaxOpen != 3 ||
		got.Identities[0].Status != "available" || !got.Identities[0].HasProxy || strings.Contains(list.Text, "pa55word") {
		t.Fatalf("list = %s (%v)", list.Text, err)
	}
	id := got.Identities[0].ID
	for _, tool := range []string{"browser_identity_launch", "browser_identity_close", "browser_identity_delete"} {
		if res := r.m.IdentityTool(ctx, tool, map[string]any{"identity_id": id}); !res.OK {
			t.Errorf("%s = %+v", tool, res)
		}
	}
	if res := r.m.IdentityTool(ctx, "browser_identity_launch", map[string]any{"identity_id": id}); res.OK || !strings.Contains(res.Text, "no browser identity") {
		t.Errorf("launch of a deleted identity = %+v", res)
	}
}

func TestLaunchWithoutABrowser(t *testing.T) {
	r := newRig(t)
	r.m.o.Command = ""
	id := r.create(t, "x", nil).ID
	if _, err := r.m.Launch(context.Background(), id); codeOf(err) != protocol.ErrLaunchFailed || !strings.Contains(err.Error(), protocol.EnvMCPCommand) {
		t.Errorf("Launch without a server = %v", err)
	}
}

// crashedSays is how a call on a crashed identity begins.
const crashedSays = "crashed ("

func TestABrowserWhoseServerDiesIsCrashed(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.create(t, "fragile", nil).ID
	if _, err := r.m.Launch(ctx, id); err != nil {
		t.Fatal(err)
	}
	res := r.m.Call(ctx, "browser_hover", map[string]any{"identity_id": id, "element": "x", "target": "e1"})
	if res.OK || !strings.Contains(res.Text, crashedSays+"its browser's server ended)") || !strings.Contains(res.Text, "call browser_identity_launch to open it again") {
		t.Errorf("a call whose server died = %+v", res)
	}
	if res := r.m.Call(ctx, "browser_tabs", map[string]any{"identity_id": id, "action": "list"}); res.OK || !strings.Contains(res.Text, crashedSays) {
		t.Errorf("the next call = %+v, want crashed: a lost browser is never reopened behind the Dot's back", res)
	}
	if _, err := r.m.Frame(ctx, id); codeOf(err) != protocol.ErrCrashed {
		t.Errorf("frame after the crash = %v, want crashed", err)
	}
	if d := cmp.Diff([]string{"created fragile", "launched fragile", "closed fragile (crashed)"}, r.browserEvents(t)); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if len(r.fake.starts) != 1 {
		t.Errorf("the server was started %d times, want once (no restart)", len(r.fake.starts))
	}
}

// TestAChromiumThatDiesUnderALivingServerIsCrashed: @playwright/mcp would
// launch a new, blank browser at the next call; the manager hears the
// browser's end itself, stops the server, and says crashed until a launch.
func TestAChromiumThatDiesUnderALivingServerIsCrashed(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.create(t, "fragile", nil).ID
	other := r.create(t, "steady", nil).ID
	for _, x := range []string{id, other} {
		if _, err := r.m.Launch(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if p := r.browser(0).profile; p != "/home/dot/browsers/"+id+"/profile" {
		t.Errorf("the watch looked for the profile %s", p)
	}

	// It dies while nothing runs on it: closed at once, as crashed, once.
	r.browser(0).kill()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(r.browserEvents(t), "closed fragile (crashed)") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	want := []string{"created fragile", "created steady", "launched fragile", "launched steady", "closed fragile (crashed)"}
	if d := cmp.Diff(want, r.browserEvents(t)); d != "" {
		t.Fatalf("events after the browser died (-want +got):\n%s", d)
	}
	if got := r.m.Counts(ctx); got.Open != 1 {
		t.Errorf("open after the crash = %d, want 1: its slot is free", got.Open)
	}
	before := r.fake.count("browser_navigate")
	res := r.m.Call(ctx, "browser_navigate", map[string]any{"identity_id": id, "url": "https://example.com/"})
	if res.OK || !strings.Contains(res.Text, "The browser of "+id+" crashed (its Chromium ended)") ||
		!strings.Contains(res.Text, "call browser_identity_launch to open it again, as the same person, on a blank page") {
		t.Errorf("a call after the browser died = %+v", res)
	}
	if r.fake.count("browser_navigate") != before {
		t.Errorf("the call reached the server, which would have opened a blank browser")
	}
	if _, err := r.m.Frame(ctx, id); codeOf(err) != protocol.ErrCrashed || !strings.Contains(err.Error(), "browser_identity_launch") {
		t.Errorf("frame of the crashed identity = %v, want crashed", err)
	}
	if err := r.m.Close(ctx, id); err != nil {
		t.Errorf("close of the crashed identity = %v", err)
	}
	list := r.m.IdentityTool(ctx, "browser_identity_list", map[string]any{})
	if !strings.Contains(list.Text, `"status": "crashed"`) || !strings.Contains(list.Text, `"status": "open"`) {
		t.Errorf("the list says:\n%s\nwant one crashed and one open", list.Text)
	}
	if res := r.m.Call(ctx, "browser_tabs", map[string]any{"identity_id": other, "action": "list"}); !res.OK {
		t.Errorf("the other identity = %+v", res)
	}

	// Only a launch clears it.
	if _, err := r.m.Launch(ctx, id); err != nil {
		t.Fatal(err)
	}
	if res := r.m.Call(ctx, "browser_navigate", map[string]any{"identity_id": id, "url": "https://example.com/"}); !res.OK {
		t.Errorf("a call after the launch = %+v", res)
	}

	// It dies during a call, which the server answers from a new, blank
	// browser: the model is told it crashed, not what the blank page said.
	third := r.browser(2)
	r.fake.mu.Lock()
	r.fake.onPress = third.kill
	r.fake.mu.Unlock()
	res = r.m.Call(ctx, "browser_press_key", map[string]any{"identity_id": id, "key": "Enter"})
	if res.OK || strings.Contains(res.Text, "about:blank") || !strings.Contains(res.Text, crashedSays+"its Chromium ended)") {
		t.Errorf("a call during which the browser died = %+v", res)
	}
	want = append(want, "launched fragile", "closed fragile (crashed)")
	deadline = time.Now().Add(5 * time.Second)
	for len(r.browserEvents(t)) < len(want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a second closed would come from the watch now
	if d := cmp.Diff(want, r.browserEvents(t)); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if len(r.fake.starts) != 3 {
		t.Errorf("%d starts, want 3 (two launches of fragile, one of steady)", len(r.fake.starts))
	}
}

func TestALaunchThatFailsIsAskedAgain(t *testing.T) {
	r := newRig(t)
	r.m.o.LaunchRetry = time.Millisecond
	ctx := context.Background()
	id := r.create(t, "slow", nil).ID

	// Two starts fail, the third opens: the model is told the browser is
	// open, once, after the retries (ref 6).
	r.fake.failStarts = 2
	got, err := r.m.Launch(ctx, id)
	if err != nil || !strings.Contains(got, "is open") {
		t.Fatalf("Launch after two failed starts = %q, %v; want it open", got, err)
	}
	if n := len(r.fake.starts); n != 3 {
		t.Errorf("%d starts; want 3 (two failed, then one that opened)", n)
	}
	if d := cmp.Diff([]string{"created slow", "launched slow"}, r.browserEvents(t)); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if err := r.m.Close(ctx, id); err != nil {
		t.Fatal(err)
	}

	// A browser that never comes up is given up once the patience is
	// spent, and the refusal says why and how often it was tried.
	r.m.o.LaunchPatience = 50 * time.Millisecond
	r.fake.failStarts = 1 << 20
	_, err = r.m.Launch(ctx, id)
	if codeOf(err) != protocol.ErrLaunchFailed || !strings.Contains(err.Error(), "did not start") || !strings.Contains(err.Error(), "tries in") {
		t.Errorf("Launch of a browser that never starts = %v; want launch_failed with the reason and the tries", err)
	}
	if err != nil && strings.Contains(err.Error(), "not started again") {
		t.Errorf("the refusal %q speaks of a declared server's restarts", err)
	}
}

// A launch gives the browser the time zone and locale of the exit it uses
// (ref 6), learned through the identity's own proxy, in a configuration file
// the server reads; an exit that cannot be placed leaves the computer's, and
// the model is told which.
func TestALaunchPlacesTheBrowserAtItsExit(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	var asked []string
	r.m.o.ConfigDir = filepath.Join(t.TempDir(), "browsers")
	r.m.o.Place = func(_ context.Context, proxy string) exitplace.Place {
		asked = append(asked, proxy)
		if proxy == "" {
			return exitplace.Place{Why: "the exit's address could not be learned: no echo answered"}
		}
		return exitplace.Place{Address: "193.0.6.139", Country: "NL", TimeZone: "Europe/Amsterdam", Locale: "nl-NL"}
	}
	p := secretProxy
	placed := r.create(t, "placed", &p).ID
	text, err := r.m.Launch(ctx, placed)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "time zone Europe/Amsterdam and locale nl-NL") {
		t.Errorf("the launch answered %q; want the time zone and locale it gave the browser", text)
	}
	file := filepath.Join(r.m.o.ConfigDir, placed+".json")
	st := r.fake.starts[len(r.fake.starts)-1]
	if i := slices.Index(st.cfg.Args, "--config"); i < 0 || i+1 >= len(st.cfg.Args) || st.cfg.Args[i+1] != file {
		t.Errorf("the server was started with %v; want --config %s", st.cfg.Args, file)
	}
	b, err := os.ReadFile(file)
	if want := `{"browser":{"contextOptions":{"locale":"nl-NL","timezoneId":"Europe/Amsterdam"}}}`; err != nil || string(b) != want {
		t.Errorf("%s holds %q (%v); want %s", file, b, err, want)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: %v, %v; want it readable by the server's user (0644)", file, fi, err)
	}
	if !slices.Equal(asked, []string{secretProxy}) {
		t.Errorf("the place was learned through %q; want the identity's own proxy", asked)
	}
	var launched protocol.BrowserIdentityEvent
	for _, ev := range r.events(t) {
		if ev.Type == protocol.EventBrowserIdentityLaunch {
			json.Unmarshal(ev.Data, &launched)
		}
	}
	if launched.TimeZone == nil || *launched.TimeZone != "Europe/Amsterdam" || launched.Locale == nil || *launched.Locale != "nl-NL" {
		t.Errorf("browser.identity.launched = %+v; want the time zone and locale", launched)
	}

	unplaced := r.create(t, "unplaced", nil).ID
	text, err = r.m.Launch(ctx, unplaced)
	if err != nil {
		t.Fatal(err)
	}
	st = r.fake.starts[len(r.fake.starts)-1]
	if slices.Contains(st.cfg.Args, "--config") || !strings.Contains(text, "computer's time zone and locale: the exit's address could not be learned") {
		t.Errorf("an exit that cannot be placed: started with %v, answered %q; want no --config and why", st.cfg.Args, text)
	}
	if strings.Contains(text, "pa55word") {
		t.Errorf("the launch's answer holds the proxy's password: %q", text)
	}
}

// TestCloseAllWithinItsDeadline: CloseAll asks every browser to close until
// its deadline (SIGTERM gives 4 s, ref 8.7), then ends its server, so a
// browser that does not close in time is killed and the close still ends by
// the deadline; the identity is recorded closed either way.
func TestCloseAllWithinItsDeadline(t *testing.T) {
	const deadline = 400 * time.Millisecond
	tests := map[string]struct {
		reason string
		hangs  bool
	}{
		"closes": {reason: "a browser that closes is asked and its server ended"},
		"hangs":  {reason: "a browser that does not close is killed at the deadline", hangs: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			if tc.hangs {
				hold := make(chan struct{})
				r.fake.closeHold = hold
				t.Cleanup(func() { close(hold) })
			}
			id := r.create(t, "a", nil).ID
			if _, err := r.m.Launch(context.Background(), id); err != nil {
				t.Fatalf("Launch = %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			began := time.Now()
			r.m.CloseAll(ctx)
			if took := time.Since(began); took > deadline+300*time.Millisecond {
				t.Errorf("%s: CloseAll took %v, want at most its deadline %v", tc.reason, took, deadline)
			}
			if r.fake.count("browser_close") != 1 {
				t.Errorf("%s: the browser was asked to close %d times, want once", tc.reason, r.fake.count("browser_close"))
			}
			for end := time.Now().Add(2 * time.Second); r.fake.endedServers() == 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			if r.fake.endedServers() != 1 {
				t.Errorf("%s: %d servers ended, want the browser's", tc.reason, r.fake.endedServers())
			}
			if d := cmp.Diff([]string{"created a", "launched a", "closed a"}, r.browserEvents(t)); d != "" {
				t.Errorf("%s: browser events (-want +got):\n%s", tc.reason, d)
			}
			if got := r.m.Counts(context.Background()); got.Open != 0 {
				t.Errorf("%s: %d open after CloseAll, want none", tc.reason, got.Open)
			}
		})
	}
}

// TestProxiesKept: what Proxies read is kept for the calls after it (they
// come after every turn) until an identity is made with a proxy, which the
// next call then gives with its password.
func TestProxiesKept(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if got := r.m.Proxies(ctx); len(got) != 0 {
		t.Fatalf("Proxies with no identity = %q", got)
	}
	r.create(t, "no proxy", nil)
	if got := r.m.Proxies(ctx); len(got) != 0 {
		t.Fatalf("Proxies after an identity without a proxy = %q", got)
	}
	proxy := secretProxy
	r.create(t, "elsewhere", &proxy)
	want := []string{secretProxy, "pa55word"}
	for try := 0; try < 2; try++ {
		if got := r.m.Proxies(ctx); !slices.Equal(got, want) {
			t.Errorf("Proxies (call %d) after an identity with a proxy = %q, want %q", try, got, want)
		}
	}
	got := r.m.Proxies(ctx)
	got[0] = "changed"
	if again := r.m.Proxies(ctx); !slices.Equal(again, want) {
		t.Errorf("a caller changing what Proxies gave changed what it gives next: %q", again)
	}
}
