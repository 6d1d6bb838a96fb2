package agentd

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestProof(t *testing.T) {
	r := newRig(t, nil)
	nonce := strings.Repeat("0a", 16)
	a := r.do(http.MethodGet, protocol.PathProof+"?nonce="+nonce, nil, false, false)
	var p protocol.ProofResponse
	a.decode(t, &p)
	if a.status != http.StatusOK || !protocol.ProofMatches(testToken, nonce, p.Proof) {
		t.Fatalf("GET /v1/proof = %d %s, want 200 with the HMAC of the token", a.status, a.body)
	}
	for name, n := range map[string]string{
		"missing":   "",
		"too short": strings.Repeat("a", protocol.ProofNonceMinHex-1),
		"too long":  strings.Repeat("a", protocol.ProofNonceMaxHex+1),
		"uppercase": strings.Repeat("A", 32),
		"not hex":   strings.Repeat("g", 32),
	} {
		t.Run(name, func(t *testing.T) {
			a := r.do(http.MethodGet, protocol.PathProof+"?nonce="+n, nil, false, false)
			if a.status != http.StatusBadRequest || a.code() != protocol.ErrBadNonce {
				t.Fatalf("nonce %q: %d %s, want 400 bad_nonce", n, a.status, a.body)
			}
		})
	}
	if a := r.localDo(http.MethodGet, protocol.PathProof+"?nonce="+nonce, nil); a.status != http.StatusNotFound {
		t.Errorf("the local socket answers the proof: %d", a.status)
	}
}

func TestEveryTCPRouteNeedsTheToken(t *testing.T) {
	r := newRig(t, nil)
	routes := []struct{ method, path string }{
		{"GET", protocol.PathHealth}, {"GET", protocol.PathSystem}, {"POST", protocol.PathExec},
		{"GET", protocol.PathFiles + "?path=a"}, {"PUT", protocol.PathFiles + "?path=a"},
		{"GET", protocol.PathFilesList}, {"GET", protocol.PathScreenshot},
		{"POST", protocol.PathPoweroff}, {"GET", protocol.PathAgentPrefix + "health"}, {"GET", "/v1/nothing"},
	}
	headers := map[string]string{"none": "", "wrong token": "Bearer wrong-token-wrong-token", "no scheme": testToken, "token plus": "Bearer " + testToken + "x"}
	for _, rt := range routes {
		for name, h := range headers {
			req, _ := http.NewRequest(rt.method, r.tcp.URL+rt.path, strings.NewReader("{}"))
			if h != "" {
				req.Header.Set("Authorization", h)
			}
			resp, err := r.tcp.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), protocol.ErrUnauthorized) {
				t.Errorf("%s %s with %s: %d %s, want 401 unauthorized", rt.method, rt.path, name, resp.StatusCode, b)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(r.dir, "powered-off")); err == nil {
		t.Fatal("a poweroff without the token powered off")
	}
	if strings.Contains(r.logs.String(), testToken) {
		t.Fatal("the log holds the token")
	}
}

func TestRoutesOfEachListener(t *testing.T) {
	r := newRig(t, nil)
	// The local socket has no proof, no poweroff and no proxy.
	for _, rt := range []struct{ method, path string }{
		{"POST", protocol.PathPoweroff}, {"GET", protocol.PathAgentPrefix + "health"}, {"GET", protocol.PathProof},
	} {
		if a := r.localDo(rt.method, rt.path, nil); a.status != http.StatusNotFound && a.status != http.StatusMethodNotAllowed {
			t.Errorf("local %s %s = %d, want 404 or 405", rt.method, rt.path, a.status)
		}
	}
	if _, err := os.Stat(filepath.Join(r.dir, "powered-off")); err == nil {
		t.Fatal("the local socket powered the computer off")
	}
	// TCP has no /v1/proc.
	if a := r.tcpDo("POST", protocol.PathProc, strings.NewReader("{}")); a.status != http.StatusNotFound && a.status != http.StatusMethodNotAllowed {
		t.Errorf("TCP POST /v1/proc = %d, want 404 or 405", a.status)
	}
	if a := r.tcpDo("GET", "/v1/unknown", nil); a.status != http.StatusNotFound || a.code() != protocol.ErrNotFound {
		t.Errorf("unknown route = %d %s, want 404 not_found", a.status, a.body)
	}
}

func TestHealth(t *testing.T) {
	r := newRig(t, nil)
	for _, local := range []bool{false, true} {
		a := r.do("GET", protocol.PathHealth, nil, !local, local)
		var h protocol.HealthResponse
		a.decode(t, &h)
		if a.status != 200 || h.Agentd != protocol.AgentdOK || string(h.Agent) != "null" || h.RuntimeVersion != "" {
			t.Fatalf("health without an engine or a runtime ISO (local %v) = %d %s, want agentd ok, agent null and no runtime_version", local, a.status, a.body)
		}
	}
	// The runtime ISO's manifest says which of our code the guest runs.
	if err := os.WriteFile(r.srv.cfg.RuntimeManifest, []byte(`{"version":"20261204T120000Z-0123456789abcdef","files":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	engine := `{"status":"ok","state":"IDLE","openrouter_configured":true}`
	fakeEngine(t, r.srv.cfg.AgentSocket, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/health" {
			http.NotFound(w, req)
			return
		}
		io.WriteString(w, engine)
	}))
	a := r.tcpDo("GET", protocol.PathHealth, nil)
	var h protocol.HealthResponse
	a.decode(t, &h)
	if string(h.Agent) != engine {
		t.Fatalf("health agent = %s, want the engine's answer %s", h.Agent, engine)
	}
	if h.RuntimeVersion != "20261204T120000Z-0123456789abcdef" {
		t.Fatalf("health runtime_version = %q, want the version in the runtime ISO's manifest", h.RuntimeVersion)
	}
}

func TestSystem(t *testing.T) {
	r := newRig(t, nil)
	a := r.tcpDo("GET", protocol.PathSystem, nil)
	var s protocol.SystemResponse
	a.decode(t, &s)
	host, _ := os.Hostname()
	if a.status != 200 || s.Hostname != host || s.CPUs < 1 || s.MemTotalBytes == 0 || s.MemAvailableBytes > s.MemTotalBytes || s.DiskTotalBytes == 0 || s.DiskFreeBytes > s.DiskTotalBytes {
		t.Fatalf("GET /v1/system = %d %+v", a.status, s)
	}
}

func TestPoweroff(t *testing.T) {
	r := newRig(t, nil)
	a := r.tcpDo("POST", protocol.PathPoweroff, nil)
	var p protocol.PoweroffResponse
	a.decode(t, &p)
	if a.status != http.StatusAccepted || p.Status != protocol.PoweroffStatus {
		t.Fatalf("poweroff = %d %s, want 202 powering_off", a.status, a.body)
	}
	marker := filepath.Join(r.dir, "powered-off")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the poweroff command never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}

	broken := newRig(t, func(c *Config) { c.PoweroffArgv = []string{"/nonexistent/systemctl", "poweroff"} })
	a = broken.tcpDo("POST", protocol.PathPoweroff, nil)
	if a.status != http.StatusInternalServerError || a.code() != protocol.ErrPoweroffFailed {
		t.Fatalf("poweroff that cannot start = %d %s, want 500 poweroff_failed", a.status, a.body)
	}
}

func TestScreenshot(t *testing.T) {
	png := "\x89PNG\r\n\x1a\nfake"
	r := newRig(t, nil)
	a := r.tcpDo("GET", protocol.PathScreenshot, nil)
	if a.status != http.StatusServiceUnavailable || a.code() != protocol.ErrNoDisplay {
		t.Fatalf("screenshot without a display = %d %s, want 503 no_display", a.status, a.body)
	}
	withDisplay := func(argv ...string) *rig {
		r := newRig(t, func(c *Config) { c.ScreenshotArgv = argv })
		os.MkdirAll(r.srv.cfg.X11SocketDir, 0o755)
		os.WriteFile(filepath.Join(r.srv.cfg.X11SocketDir, "X0"), nil, 0o644)
		return r
	}
	r = withDisplay("/bin/sh", "-c", `test "$DISPLAY" = :0 && printf '\211PNG\r\n\032\nfake'`)
	for _, local := range []bool{false, true} {
		a = r.do("GET", protocol.PathScreenshot, nil, !local, local)
		if a.status != 200 || a.header.Get("Content-Type") != "image/png" || string(a.body) != png {
			t.Fatalf("screenshot (local %v) = %d %q %q, want the program's PNG", local, a.status, a.header.Get("Content-Type"), a.body)
		}
	}
	r = withDisplay("/bin/sh", "-c", "echo cannot open display >&2; exit 1")
	a = r.tcpDo("GET", protocol.PathScreenshot, nil)
	if a.status != 500 || a.code() != protocol.ErrScreenshotFailed || !strings.Contains(string(a.body), "cannot open display") {
		t.Fatalf("failing screenshot = %d %s, want 500 screenshot_failed with the program's words", a.status, a.body)
	}
}

func TestAgentProxy(t *testing.T) {
	r := newRig(t, nil)
	a := r.tcpDo("GET", protocol.PathAgentPrefix+"health", nil)
	if a.status != http.StatusBadGateway || a.code() != protocol.ErrAgentUnavailable {
		t.Fatalf("proxy without an engine = %d %s, want 502 agent_unavailable", a.status, a.body)
	}
	type seen struct {
		Method, Path, Query, Auth, Body string
	}
	fakeEngine(t, r.srv.cfg.AgentSocket, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		json.NewEncoder(w).Encode(seen{req.Method, req.URL.Path, req.URL.RawQuery, req.Header.Get("Authorization"), string(b)})
	}))
	a = r.tcpDo("POST", protocol.PathAgentPrefix+"events?after=7", strings.NewReader(`{"x":1}`))
	var got seen
	a.decode(t, &got)
	if diff := cmp.Diff(seen{"POST", "/events", "after=7", "", `{"x":1}`}, got); diff != "" {
		t.Fatalf("what the engine saw (-want +got); the token must not reach it:\n%s", diff)
	}
}

func TestBadBodies(t *testing.T) {
	r := newRig(t, nil)
	for name, body := range map[string]string{"not json": "{", "unknown field": `{"command":"true","shell":"x"}`, "empty command": `{}`, "timeout too long": `{"command":"true","timeout_ms":600001}`, "negative timeout": `{"command":"true","timeout_ms":-1}`} {
		a := r.tcpDo("POST", protocol.PathExec, strings.NewReader(body))
		if a.status != 400 || a.code() != protocol.ErrInvalidRequest {
			t.Errorf("exec %s: %d %s, want 400 invalid_request", name, a.status, a.body)
		}
	}
}
