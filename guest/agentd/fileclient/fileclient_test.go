package fileclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/agentd"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// serve serves h on a unix socket of its own and returns the socket's path.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	// A socket path must stay under 108 bytes: t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "fileclient")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "agentd.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return socket
}

// realAgentd serves the local handler of a real dot-agentd in development
// mode (files as this test's user) over a home in a temporary directory.
func realAgentd(t *testing.T) (socket, home string) {
	t.Helper()
	home = t.TempDir()
	cfg := agentd.DefaultConfig()
	cfg.Token = "test-token-0123456789abcdef"
	cfg.Home = home
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv.LocalHandler()), home
}

func TestWithRealAgentd(t *testing.T) {
	socket, home := realAgentd(t)
	c := New(socket, 0)
	ctx := context.Background()

	note := filepath.Join(home, "memory", "notes", "a.md")
	if err := c.Write(ctx, note, []byte("hello")); err != nil {
		t.Fatalf("Write into missing folders: %v", err)
	}
	got, err := c.Read(ctx, note)
	if err != nil || string(got) != "hello" {
		t.Errorf("Read(%s) = %q, %v; want %q", note, got, err, "hello")
	}
	empty := filepath.Join(home, "memory", "empty.md")
	if err := c.Write(ctx, empty, nil); err != nil {
		t.Fatalf("Write of nil data: %v", err)
	}
	if got, err := c.Read(ctx, empty); err != nil || len(got) != 0 {
		t.Errorf("Read(%s) = %q, %v; want an empty file", empty, got, err)
	}
	entries, err := c.List(ctx, filepath.Join(home, "memory"))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name+" "+e.Type)
	}
	sort.Strings(names)
	if diff := cmp.Diff([]string{"empty.md file", "notes dir"}, names); diff != "" {
		t.Errorf("List of memory (-want +got):\n%s", diff)
	}

	refusals := map[string]struct {
		call    func() error
		code    string
		message string
	}{
		"read a missing file": {
			call:    func() error { _, err := c.Read(ctx, filepath.Join(home, "nope")); return err },
			code:    protocol.ErrNotFound,
			message: filepath.Join(home, "nope") + " does not exist",
		},
		"list a missing folder": {
			call:    func() error { _, err := c.List(ctx, filepath.Join(home, "nope")); return err },
			code:    protocol.ErrNotFound,
			message: filepath.Join(home, "nope") + " does not exist",
		},
		"read a directory": {
			call:    func() error { _, err := c.Read(ctx, filepath.Join(home, "memory")); return err },
			code:    protocol.ErrIsDirectory,
			message: filepath.Join(home, "memory") + " is a directory",
		},
		"write over a directory": {
			call:    func() error { return c.Write(ctx, filepath.Join(home, "memory"), []byte("x")) },
			code:    protocol.ErrIsDirectory,
			message: filepath.Join(home, "memory") + " is a directory",
		},
		"list a file": {
			call:    func() error { _, err := c.List(ctx, note); return err },
			code:    protocol.ErrNotDirectory,
			message: note + " is not a directory",
		},
	}
	for name, tc := range refusals {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			if !HasCode(err, tc.code) {
				t.Errorf("error %v does not have code %s", err, tc.code)
			}
			if err == nil || err.Error() != tc.message {
				t.Errorf("error = %v, want %q", err, tc.message)
			}
		})
	}
}

// TestRefusals covers answers the real dot-agentd gives only in the guest
// (permission_denied needs a user other than root) or never on purpose.
func TestRefusals(t *testing.T) {
	answer := func(status int, body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			io.WriteString(w, body)
		})
	}
	body := func(code, msg string) string {
		b, _ := json.Marshal(protocol.ErrorResponse{Error: code, Message: msg})
		return string(b)
	}
	tests := map[string]struct {
		h    http.Handler
		want *Error
		text string
	}{
		"permission denied": {
			h:    answer(403, body(protocol.ErrPermissionDenied, "no")),
			want: &Error{Status: 403, Code: protocol.ErrPermissionDenied, Message: "no", Path: "/f"},
			text: "the dot user may not open /f",
		},
		"too large": {
			h:    answer(413, body(protocol.ErrTooLarge, "")),
			want: &Error{Status: 413, Code: protocol.ErrTooLarge, Path: "/f"},
			text: "/f is too large for the file route (at most 268435456 bytes)",
		},
		"a 404 without a body is not_found": {
			h:    http.NotFoundHandler(),
			want: &Error{Status: 404, Code: protocol.ErrNotFound, Path: "/f"},
			text: "/f does not exist",
		},
		"another code says its message": {
			h:    answer(400, body(protocol.ErrOutsideHome, "/f is outside /home/dot")),
			want: &Error{Status: 400, Code: protocol.ErrOutsideHome, Message: "/f is outside /home/dot", Path: "/f"},
			text: "dot-agentd refused /f: /f is outside /home/dot",
		},
		"a code without a message": {
			h:    answer(500, body(protocol.ErrInternal, "")),
			want: &Error{Status: 500, Code: protocol.ErrInternal, Path: "/f"},
			text: "dot-agentd refused /f: " + protocol.ErrInternal,
		},
		"no body says the status": {
			h:    answer(502, ""),
			want: &Error{Status: 502, Path: "/f"},
			text: "dot-agentd refused /f: Bad Gateway",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(serve(t, tc.h), 0).Read(context.Background(), "/f")
			var got *Error
			if !errors.As(err, &got) {
				t.Fatalf("Read error = %v, want an *Error", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if got.Error() != tc.text {
				t.Errorf("error text = %q, want %q", got.Error(), tc.text)
			}
		})
	}
}

func TestNoAnswer(t *testing.T) {
	dir, err := os.MkdirTemp("", "fileclient")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	missing := filepath.Join(dir, "absent.sock")

	_, err = New(missing, 0).Read(context.Background(), "/f")
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("Read on a missing socket = %v, want it to wrap the dial's *net.OpError", err)
	}
	if HasCode(err, protocol.ErrNotFound) {
		t.Errorf("a missing socket reads as a missing file: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New(missing, 0).List(ctx, "/f"); err != context.Canceled {
		t.Errorf("List with a cancelled context = %v, want the context's error itself", err)
	}

	// The timeout bounds a request that dot-agentd never answers.
	stuck := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	if err := New(stuck, 10*time.Millisecond).Write(context.Background(), "/f", []byte("x")); err == nil {
		t.Errorf("Write to a dot-agentd that never answers returned no error despite the timeout")
	}
}

func TestScreenshot(t *testing.T) {
	png := "\x89PNG\r\n\x1a\nfake"
	var gotPath, gotQuery string
	socket := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery = r.URL.Path, r.URL.RawQuery
		w.Header().Set("Content-Type", "image/png")
		io.WriteString(w, png)
	}))
	b, err := New(socket, 0).Screenshot(context.Background())
	if err != nil || string(b) != png || gotPath != protocol.PathScreenshot || gotQuery != "" {
		t.Fatalf("Screenshot = %q, %v on %s?%s; want the PNG from %s", b, err, gotPath, gotQuery, protocol.PathScreenshot)
	}
	socket = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(protocol.ErrorResponse{Error: protocol.ErrNoDisplay, Message: "display :0 is not running"})
	}))
	_, err = New(socket, 0).Screenshot(context.Background())
	if !HasCode(err, protocol.ErrNoDisplay) || err.Error() != "dot-agentd refused: display :0 is not running" {
		t.Fatalf("Screenshot without a display = %v, want no_display with its message", err)
	}
}
