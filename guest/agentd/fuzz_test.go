package agentd

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// FuzzFilePath: whatever path the host sends, a confined target is refused
// or lies under home, its links followed.
func FuzzFilePath(f *testing.F) {
	dir := f.TempDir()
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, "notes", "deep"), 0o755)
	os.WriteFile(filepath.Join(home, "notes", "a.md"), []byte("a"), 0o644)
	os.Symlink("/etc", filepath.Join(home, "etc-link"))
	os.Symlink("notes", filepath.Join(home, "notes-link"))
	os.Symlink("../../outside", filepath.Join(home, "notes", "up"))
	os.Symlink("loop", filepath.Join(home, "loop"))
	for _, p := range []string{"notes/a.md", "../outside", "etc-link/passwd", "notes-link/../../x", "notes/up/x", "/etc/passwd", "loop/x", home, "a\x00b", strings.Repeat("n/", 300)} {
		f.Add(p)
	}
	realHome, err := filepath.EvalSymlinks(home)
	if err != nil {
		f.Fatal(err)
	}
	a := fileAccess{home: home, confined: true}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := a.target(p)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = fsError(p, err)
			}
			if ae.status >= 500 {
				t.Fatalf("target(%q) = %v: a path is the caller's, never a server fault", p, err)
			}
			return
		}
		if got != realHome && !strings.HasPrefix(got, realHome+"/") {
			t.Fatalf("target(%q) = %q, outside home %q", p, got, realHome)
		}
	})
}

// FuzzExecBody: an exec body is taken, or refused as the caller's mistake.
func FuzzExecBody(f *testing.F) {
	f.Add([]byte(`{"command":"true"}`))
	f.Add([]byte(`{"command":"true","cwd":"notes","timeout_ms":100}`))
	f.Add([]byte(`{"command":"true"} {"command":"x"}`))
	f.Add([]byte(`{"command":"","timeout_ms":-1}`))
	f.Add([]byte(`{"command":"true","cwd":"/nonexistent"}`))
	cfg := DefaultConfig()
	cfg.Token, cfg.Home, cfg.Shell = testToken, f.TempDir(), "/bin/sh"
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	h := srv.TCPHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req protocol.ExecRequest
		if err := decodeBody(httptest.NewRequest("POST", protocol.PathExec, bytes.NewReader(body)), 1<<20, &req); err == nil {
			// Only bodies refused are sent whole: running fuzzed commands
			// is not this test's business.
			return
		}
		rec := httptest.NewRecorder()
		hr := httptest.NewRequest("POST", protocol.PathExec, bytes.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+testToken)
		h.ServeHTTP(rec, hr)
		if rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("a refused body answered %d %s", rec.Code, rec.Body)
		}
	})
}
