package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/agentd/agentdtest"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

const testToken = "test-token-0123456789abcdef"

// rig is one dot-agentd in development mode (or as another user) with both
// listeners, a home in a temporary directory, and fakes for what the test
// machine lacks: the engine's socket, a display, the poweroff command.
type rig struct {
	t       *testing.T
	srv     *Server
	tcp     *httptest.Server
	local   string // path of the local socket
	home    string
	dir     string
	logs    *agentdtest.LockedBuffer
	localCl *http.Client
}

func newRig(t *testing.T, edit func(*Config)) *rig {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &agentdtest.LockedBuffer{}
	cfg := DefaultConfig()
	cfg.Token = testToken
	cfg.Home = home
	cfg.AgentSocket = filepath.Join(dir, "agent.sock")
	cfg.X11SocketDir = filepath.Join(dir, "x11")
	cfg.PoweroffArgv = []string{"/bin/sh", "-c", "echo off > " + filepath.Join(dir, "powered-off")}
	cfg.Shell = "/bin/sh"
	// No runtime ISO is mounted here unless a test writes its manifest.
	cfg.RuntimeManifest = filepath.Join(dir, "runtime-manifest.json")
	cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	if edit != nil {
		edit(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, srv: srv, home: home, dir: dir, logs: logs}
	r.tcp = httptest.NewServer(srv.TCPHandler())
	t.Cleanup(r.tcp.Close)
	// The socket path must stay short (108 bytes): use a directory of its own.
	sockDir, err := os.MkdirTemp("", "agentd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	r.local = filepath.Join(sockDir, "agentd.sock")
	ln, err := listenUnix(r.local)
	if err != nil {
		t.Fatal(err)
	}
	ls := &http.Server{Handler: srv.LocalHandler()}
	go ls.Serve(ln)
	t.Cleanup(func() { ls.Close() })
	r.localCl = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", r.local)
	}}}
	return r
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) code() string {
	var e protocol.ErrorResponse
	_ = json.Unmarshal(a.body, &e)
	return e.Error
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d %q does not decode into %T: %v", a.status, a.body, v, err)
	}
}

// do sends a request over TCP (with the token when withToken) or over the
// local socket (local true).
func (r *rig) do(method, path string, body io.Reader, withToken, local bool) answer {
	r.t.Helper()
	base, cl := r.tcp.URL, r.tcp.Client()
	if local {
		base, cl = "http://agentd", r.localCl
	}
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		r.t.Fatal(err)
	}
	if withToken {
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := cl.Do(req.WithContext(ctx))
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func (r *rig) tcpDo(method, path string, body io.Reader) answer {
	return r.do(method, path, body, true, false)
}

func (r *rig) localDo(method, path string, body io.Reader) answer {
	return r.do(method, path, body, false, true)
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

// fakeEngine serves the engine's socket with handler.
func fakeEngine(t *testing.T, path string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
