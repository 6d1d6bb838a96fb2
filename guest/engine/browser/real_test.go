package browser

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/agentd/agentdtest"
	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd"
	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd/proxyfwdtest"
	"github.com/invisible-dots/invisible-dots/guest/engine/browser/exitplace"
	"github.com/invisible-dots/invisible-dots/guest/engine/mcphost"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// EnvPlaywrightMCPDir names a directory where `npm ci` already installed
// guest/image/golden/npm's lock (`make playwright-mcp`); without it the real
// test installs it once into the user's cache directory.
const EnvPlaywrightMCPDir = "INVISIBLE_DOTS_PLAYWRIGHT_MCP_DIR"

// goldenNPM is the golden image's lock of @playwright/mcp, the one the image
// installs.
var goldenNPM = filepath.Join("..", "..", "image", "golden", "npm")

// installPlaywrightMCP returns a directory holding @playwright/mcp installed
// from the golden image's lock, installing it with `npm ci` when needed.
func installPlaywrightMCP(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(EnvPlaywrightMCPDir); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@playwright", "mcp", "cli.js")); err == nil {
			return dir
		}
	}
	lock, err := os.ReadFile(filepath.Join(goldenNPM, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := os.ReadFile(filepath.Join(goldenNPM, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no cache directory to install @playwright/mcp into (%v); set %s", err, EnvPlaywrightMCPDir)
	}
	sum := sha256.Sum256(append(pkg, lock...))
	dir := filepath.Join(cache, "invisible-dots", "playwright-mcp-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@playwright", "mcp", "cli.js")); err == nil {
		return dir
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skipf("npm is needed to install @playwright/mcp for the real browser test (Debian: apt-get install npm), or set %s", EnvPlaywrightMCPDir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci of the golden image's @playwright/mcp in %s: %v\n%s", dir, err, out)
	}
	return dir
}

// TestMain removes the dot-agentd the real test built.
func TestMain(m *testing.M) { os.Exit(agentdtest.Main(m)) }

// realBrowser is the golden image's @playwright/mcp on this machine's
// Chromium (headless) through a real dot-agentd relay.
type realBrowser struct {
	m     *Manager
	st    *store.Store
	home  string
	agent *agentdtest.Agentd
}

func newRealBrowser(t *testing.T) *realBrowser {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real browser")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("Debian's chromium is needed for the real browser test (apt-get install chromium)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is needed for the real browser test (apt-get install nodejs)")
	}
	pw := installPlaywrightMCP(t)
	home := t.TempDir()
	agentd := agentdtest.Start(t, home, "test/browser")
	bin, socket := agentd.Bin, agentd.Socket

	// The golden wrapper (/usr/local/bin/playwright-mcp) with this machine's
	// paths.
	wrapper := filepath.Join(t.TempDir(), "playwright-mcp")
	script := fmt.Sprintf("#!/bin/sh\nexec %s %s --browser chromium --executable-path %s \"$@\"\n",
		node, filepath.Join(pw, "node_modules", "@playwright", "mcp", "cli.js"), chromium)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// No display here: headless. Chromium refuses its sandbox to root.
	args := []string{"--headless"}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox")
	}
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l := mcphost.Launcher{RelayPath: bin, AgentdSocket: socket, Cwd: home, Path: os.Getenv("PATH"), TerminateAfter: 2 * time.Second}
	m := New(Options{
		Store: st, Command: wrapper, Args: args, Forwarder: bin, Home: home, Dial: l.Dialer, Remove: RelayRemover(l),
		StartupTimeout: 2 * time.Minute, CallTimeout: time.Minute,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	t.Cleanup(func() { m.CloseAll(context.Background()) })
	return &realBrowser{m: m, st: st, home: home, agent: agentd}
}

// TestRealPlaywrightMCPKeepsTheProfile runs the golden image's
// @playwright/mcp on this machine's Chromium, through the real dot-agentd
// relay: a cookie a page sets in one launch of an identity is sent again by
// the next launch of the same profile.
func TestRealPlaywrightMCPKeepsTheProfile(t *testing.T) {
	rb := newRealBrowser(t)
	m, home := rb.m, rb.home
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := "none"
		if c, err := r.Cookie("visit"); err == nil {
			got = c.Value
		}
		http.SetCookie(w, &http.Cookie{Name: "visit", Value: "remembered", MaxAge: 86400, Path: "/"})
		fmt.Fprintf(w, "<!doctype html><title>cookie test</title><p>cookie was %s</p>", got)
	}))
	defer site.Close()

	ctx := context.Background()
	if err := m.Probe(ctx); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	var names []string
	for _, tl := range m.Tools() {
		names = append(names, tl.Name)
	}
	t.Logf("the server's tools: %s", strings.Join(names, " "))
	bi, err := m.Create(ctx, "cookie keeper", nil)
	if err != nil {
		t.Fatal(err)
	}
	visit := func(want string) {
		t.Helper()
		start := time.Now()
		text, err := m.Launch(ctx, bi.ID)
		if err != nil {
			t.Fatalf("Launch: %v", err)
		}
		t.Logf("launch took %s: %s", time.Since(start).Round(time.Millisecond), text)
		if res := m.Call(ctx, "browser_navigate", map[string]any{"identity_id": bi.ID, "url": site.URL}); !res.OK {
			t.Fatalf("browser_navigate = %s", res.Text)
		}
		// After a navigation the server writes the page's snapshot to a
		// file of its output directory; browser_snapshot answers it inline.
		res := m.Call(ctx, "browser_snapshot", map[string]any{"identity_id": bi.ID})
		if !res.OK || !strings.Contains(res.Text, "cookie was "+want) {
			t.Fatalf("browser_snapshot = ok %v:\n%s\nwant the page to say the cookie was %s", res.OK, res.Text, want)
		}
		shot := m.Call(ctx, "browser_take_screenshot", map[string]any{"identity_id": bi.ID})
		if !shot.OK || len(shot.ImageURLs) != 1 || !strings.Contains(shot.Text, "[screenshot, 1280x720, not stored]") {
			t.Errorf("browser_take_screenshot = ok %v, %d images:\n%s", shot.OK, len(shot.ImageURLs), shot.Text)
		}
		frame, err := m.Frame(ctx, bi.ID)
		if err != nil || len(frame) < 3 || frame[0] != 0xFF || frame[1] != 0xD8 {
			t.Errorf("Frame = %d bytes, %v; want a JPEG", len(frame), err)
		}
		start = time.Now()
		if err := m.Close(ctx, bi.ID); err != nil {
			t.Fatalf("Close: %v", err)
		}
		t.Logf("close took %s", time.Since(start).Round(time.Millisecond))
	}
	visit("none")
	if _, err := os.Stat(filepath.Join(home, "browsers", bi.ID, "profile")); err != nil {
		t.Fatalf("the profile is not under the identity's directory: %v", err)
	}
	visit("remembered")
	out, _ := os.ReadDir(filepath.Join(home, "browsers", bi.ID, "output"))
	t.Logf("the server's output directory holds %d files", len(out))
	if err := m.Delete(ctx, bi.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, "browsers", bi.ID)); !os.IsNotExist(err) {
		t.Errorf("the identity's directory is still there after its delete: %v", err)
	}
}

// TestRealChromiumThatDiesIsCrashed kills the Chromium of an open identity
// under its living @playwright/mcp: the identity is closed as crashed at
// once, no new browser is launched on its profile (the server, which would
// open a blank one at the next call, is stopped), calls say crashed, and a
// launch opens the same profile again.
func TestRealChromiumThatDiesIsCrashed(t *testing.T) {
	rb := newRealBrowser(t)
	m := rb.m
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<!doctype html><title>crash test</title><p>still here</p>")
	}))
	defer site.Close()
	ctx := context.Background()
	bi, err := m.Create(ctx, "fragile", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Launch(ctx, bi.ID); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if res := m.Call(ctx, "browser_navigate", map[string]any{"identity_id": bi.ID, "url": site.URL}); !res.OK {
		t.Fatalf("browser_navigate = %s", res.Text)
	}
	profile := filepath.Join(rb.home, "browsers", bi.ID, "profile")
	pid, err := findChromium("/proc", profile)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	closed := func() bool {
		evs, _ := rb.st.EventsAfter(ctx, 0, 1000)
		for _, ev := range evs {
			if ev.Type == protocol.EventBrowserIdentityClosed && strings.Contains(string(ev.Data), `"reason":"crashed"`) {
				return true
			}
		}
		return false
	}
	for !closed() && time.Since(start) < 30*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if !closed() {
		t.Fatal("no browser.identity.closed (crashed) 30 s after Chromium was killed")
	}
	t.Logf("browser.identity.closed (crashed) %s after Chromium was killed", time.Since(start).Round(time.Millisecond))
	res := m.Call(ctx, "browser_navigate", map[string]any{"identity_id": bi.ID, "url": site.URL})
	if res.OK || !strings.Contains(res.Text, "crashed (its Chromium ended)") {
		t.Errorf("a call after the crash = %+v", res)
	}
	if _, err := m.Frame(ctx, bi.ID); codeOf(err) != protocol.ErrCrashed {
		t.Errorf("frame after the crash = %v, want crashed", err)
	}
	time.Sleep(time.Second)
	if pid, err := findChromium("/proc", profile); err == nil {
		t.Errorf("a Chromium (%d) runs on the crashed identity's profile again", pid)
	}
	if _, err := m.Launch(ctx, bi.ID); err != nil {
		t.Fatalf("Launch after the crash: %v", err)
	}
	if res := m.Call(ctx, "browser_navigate", map[string]any{"identity_id": bi.ID, "url": site.URL}); !res.OK {
		t.Fatalf("browser_navigate after the launch = %s", res.Text)
	}
	// (A cookie the page set just before the kill is not asserted: Chromium
	// writes its cookies to the profile lazily, and a SIGKILL loses them.)
	if res := m.Call(ctx, "browser_snapshot", map[string]any{"identity_id": bi.ID}); !res.OK || !strings.Contains(res.Text, "crash test") {
		t.Errorf("the page after the crash and a launch:\n%s", res.Text)
	}
}

// TestRealProxyWithCredentials loads a page on the loopback through stand-in
// proxies that require a user and password, a SOCKS5 one (which Chromium
// cannot authenticate to at all) and an HTTP one (which it cannot through
// @playwright/mcp): the forwarder carries the credentials, the page is served
// under a name only the stand-ins resolve, and no command line holds the
// password.
func TestRealProxyWithCredentials(t *testing.T) {
	rb := newRealBrowser(t)
	m := rb.m
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ip" {
			// The address-echo service, as the proxy's exit.
			fmt.Fprintln(w, "193.0.6.139")
			return
		}
		fmt.Fprintf(w, "<!doctype html><title>proxied</title><p>served to %s for %s</p>"+
			"<p id=place></p><script>document.getElementById('place').textContent = 'placed in ' + Intl.DateTimeFormat().resolvedOptions().timeZone + ' ' + navigator.language</script>", r.Host, r.URL.Path)
	}))
	defer site.Close()
	ctx := context.Background()
	// Each launch learns its exit through the identity's proxy and gives
	// the browser its time zone and locale (ref 6); the country is the
	// test's (exitplace's own test reads the real GeoIP database).
	m.o.ConfigDir = filepath.Join(t.TempDir(), "browsers")
	m.o.Place = func(ctx context.Context, proxy string) exitplace.Place {
		return exitplace.Learn(ctx, exitplace.Options{
			EchoURLs: []string{"http://" + proxyfwdtest.SiteName + "/ip"},
			Country:  func(context.Context, netip.Addr) (string, error) { return "NL", nil },
		}, proxy)
	}
	socks := proxyfwdtest.StartFakeSOCKS5Proxy(t, site.Listener.Addr().String())
	httpp := proxyfwdtest.StartFakeHTTPProxy(t, site.Listener.Addr().String(), false)
	for _, tc := range []struct {
		name  string
		proxy string
		seen  func() proxyfwdtest.Seen
	}{
		{"socks5", socks.URL(proxyfwdtest.User, proxyfwdtest.Password), socks.Seen},
		{"http", httpp.URL(proxyfwdtest.User, proxyfwdtest.Password), httpp.Seen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi, err := m.Create(ctx, "behind "+tc.name, &tc.proxy)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := m.Launch(ctx, bi.ID); err != nil {
				t.Fatalf("Launch: %v", err)
			}
			t.Logf("launch behind the forwarder took %s", time.Since(start).Round(time.Millisecond))
			page := "http://" + proxyfwdtest.SiteName + "/through-" + tc.name
			if res := m.Call(ctx, "browser_navigate", map[string]any{"identity_id": bi.ID, "url": page}); !res.OK {
				t.Fatalf("browser_navigate = %s", res.Text)
			}
			res := m.Call(ctx, "browser_snapshot", map[string]any{"identity_id": bi.ID})
			if want := "served to " + proxyfwdtest.SiteName + " for /through-" + tc.name; !res.OK || !strings.Contains(res.Text, want) {
				t.Fatalf("browser_snapshot:\n%s\nwant %q", res.Text, want)
			}
			if want := "placed in Europe/Amsterdam nl-NL"; !strings.Contains(res.Text, want) {
				t.Errorf("browser_snapshot:\n%s\nwant %q: the exit's time zone and locale", res.Text, want)
			}
			seen := tc.seen()
			if !slices.Contains(seen.Auths, proxyfwdtest.User+":"+proxyfwdtest.Password) {
				t.Errorf("the stand-in proxy was given %q, not the identity's credentials", seen.Auths)
			}
			if !slices.Contains(seen.Dests, proxyfwdtest.SiteName+":80") {
				t.Errorf("the stand-in proxy was asked for %q, not the page", seen.Dests)
			}
			if pids := commandLinesHolding(proxyfwdtest.Password); len(pids) > 0 {
				t.Errorf("the proxy's password is on the command line of %v", pids)
			}
			if n := len(forwarders()); n != 1 {
				t.Errorf("%d forwarders run for the one identity behind a proxy", n)
			}
			if err := m.Close(ctx, bi.ID); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(forwarders()) > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if left := forwarders(); len(left) > 0 {
				t.Errorf("the forwarder outlived its server: %v", left)
			}
		})
	}
}

// commandLinesHolding are the processes whose command line holds s.
func commandLinesHolding(s string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// forwarders are the running `dot-agentd proxy-forward` processes (not the
// relays that name one).
func forwarders() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if args := strings.Split(string(b), "\x00"); err == nil && len(args) > 1 && args[1] == proxyfwd.Subcommand {
			out = append(out, e.Name())
		}
	}
	return out
}
