package agentd

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func q(p string) string { return "?path=" + url.QueryEscape(p) }

func TestFilesRoundTrip(t *testing.T) {
	r := newRig(t, nil)
	for _, local := range []bool{false, true} {
		name := fmt.Sprintf("notes-%v/deep/a.txt", local)
		a := r.do("PUT", protocol.PathFiles+q(name), strings.NewReader("hello"), !local, local)
		if a.status != http.StatusNoContent {
			t.Fatalf("PUT (local %v) = %d %s, want 204", local, a.status, a.body)
		}
		if b, err := os.ReadFile(filepath.Join(r.home, name)); err != nil || string(b) != "hello" {
			t.Fatalf("the file in home holds %q, %v", b, err)
		}
		a = r.do("GET", protocol.PathFiles+q(filepath.Join(r.home, name)), nil, !local, local)
		if a.status != 200 || string(a.body) != "hello" {
			t.Fatalf("GET by absolute path = %d %q", a.status, a.body)
		}
		// A second PUT replaces the content and keeps the mode.
		os.Chmod(filepath.Join(r.home, name), 0o600)
		r.do("PUT", protocol.PathFiles+q(name), strings.NewReader("bye"), !local, local)
		fi, _ := os.Stat(filepath.Join(r.home, name))
		b, _ := os.ReadFile(filepath.Join(r.home, name))
		if string(b) != "bye" || fi.Mode().Perm() != 0o600 {
			t.Fatalf("after a second PUT: %q mode %v, want \"bye\" 0600", b, fi.Mode().Perm())
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(r.home, "notes-*", "deep", ".*"))
	if len(leftovers) > 0 {
		t.Fatalf("temporary files left behind: %v", leftovers)
	}
}

func TestFilesList(t *testing.T) {
	r := newRig(t, nil)
	os.MkdirAll(filepath.Join(r.home, "d", "sub"), 0o755)
	os.WriteFile(filepath.Join(r.home, "d", "f.txt"), []byte("12345"), 0o644)
	os.Symlink("f.txt", filepath.Join(r.home, "d", "link"))
	os.Symlink("nowhere", filepath.Join(r.home, "d", "dangling"))
	a := r.tcpDo("GET", protocol.PathFilesList+q("d"), nil)
	var got protocol.ListResponse
	a.decode(t, &got)
	want := []protocol.ListEntry{
		{Name: "dangling", Type: protocol.EntryOther},
		{Name: "f.txt", Type: protocol.EntryFile, Size: 5},
		{Name: "link", Type: protocol.EntryFile, Size: 5},
		{Name: "sub", Type: protocol.EntryDir},
	}
	if diff := cmp.Diff(want, got.Entries, cmpopts.IgnoreFields(protocol.ListEntry{}, "Mtime", "Size")); diff != "" {
		t.Fatalf("list (-want +got):\n%s", diff)
	}
	if got.Entries[1].Size != 5 || got.Entries[1].Mtime == "" {
		t.Fatalf("f.txt listed as %+v, want size 5 and an mtime", got.Entries[1])
	}
	// No path lists home.
	a = r.tcpDo("GET", protocol.PathFilesList, nil)
	a.decode(t, &got)
	if len(got.Entries) != 1 || got.Entries[0].Name != "d" {
		t.Fatalf("list of home = %+v", got.Entries)
	}
}

func TestFileRefusals(t *testing.T) {
	r := newRig(t, nil)
	outside := filepath.Join(r.dir, "outside")
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644)
	os.MkdirAll(filepath.Join(r.home, "dir"), 0o755)
	os.WriteFile(filepath.Join(r.home, "file"), []byte("f"), 0o644)
	os.Symlink(outside, filepath.Join(r.home, "escape"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(r.home, "secret-link"))
	os.Symlink(filepath.Join(outside, "new"), filepath.Join(r.home, "dangling-out"))
	os.Symlink("file", filepath.Join(r.home, "inside-link"))
	tests := []struct {
		name, method, route, path string
		status                    int
		code                      string
	}{
		{"absolute outside", "GET", protocol.PathFiles, filepath.Join(outside, "secret"), 403, protocol.ErrOutsideHome},
		{"dot-dot", "GET", protocol.PathFiles, "../outside/secret", 403, protocol.ErrOutsideHome},
		{"link to outside dir", "GET", protocol.PathFiles, "escape/secret", 403, protocol.ErrOutsideHome},
		{"link to outside file", "GET", protocol.PathFiles, "secret-link", 403, protocol.ErrOutsideHome},
		{"put through link", "PUT", protocol.PathFiles, "escape/planted", 403, protocol.ErrOutsideHome},
		{"put through dangling link", "PUT", protocol.PathFiles, "dangling-out", 403, protocol.ErrOutsideHome},
		{"list outside", "GET", protocol.PathFilesList, "escape", 403, protocol.ErrOutsideHome},
		{"list root", "GET", protocol.PathFilesList, "/", 403, protocol.ErrOutsideHome},
		{"missing", "GET", protocol.PathFiles, "nope", 404, protocol.ErrNotFound},
		{"list missing", "GET", protocol.PathFilesList, "nope", 404, protocol.ErrNotFound},
		{"get a directory", "GET", protocol.PathFiles, "dir", 400, protocol.ErrIsDirectory},
		{"put a directory", "PUT", protocol.PathFiles, "dir", 400, protocol.ErrIsDirectory},
		{"list a file", "GET", protocol.PathFilesList, "file", 400, protocol.ErrNotDirectory},
		{"no path", "GET", protocol.PathFiles, "", 400, protocol.ErrInvalidRequest},
		{"under a file", "PUT", protocol.PathFiles, "file/x", 400, protocol.ErrNotDirectory},
		{"get a fifo", "GET", protocol.PathFiles, "fifo", 400, protocol.ErrInvalidRequest},
		{"put a fifo", "PUT", protocol.PathFiles, "fifo", 400, protocol.ErrInvalidRequest},
	}
	if err := syscall.Mkfifo(filepath.Join(r.home, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := r.tcpDo(tc.method, tc.route+q(tc.path), strings.NewReader("x"))
			if a.status != tc.status || a.code() != tc.code {
				t.Fatalf("%s %s %q = %d %s, want %d %s", tc.method, tc.route, tc.path, a.status, a.body, tc.status, tc.code)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a PUT through a link wrote outside home")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Fatal("a PUT through a dangling link wrote outside home")
	}
	// A link that stays inside home is followed.
	if a := r.tcpDo("GET", protocol.PathFiles+q("inside-link"), nil); a.status != 200 || string(a.body) != "f" {
		t.Fatalf("link inside home = %d %q", a.status, a.body)
	}
	// The engine's socket is not confined.
	for _, p := range []string{filepath.Join(outside, "secret"), "secret-link", "escape/secret"} {
		if a := r.localDo("GET", protocol.PathFiles+q(p), nil); a.status != 200 || string(a.body) != "s" {
			t.Fatalf("local GET %q = %d %q, want the file", p, a.status, a.body)
		}
	}
}

func TestPutTooLarge(t *testing.T) {
	r := newRig(t, nil)
	// Announce more than the limit and send nothing: refused before reading.
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.tcp.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT %s%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", protocol.PathFiles, q("big"), testToken, protocol.FilesMaxPutBytes+1)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized PUT = %d, want 413", resp.StatusCode)
	}
	if _, err := os.Stat(filepath.Join(r.home, "big")); err == nil {
		t.Fatal("an oversized PUT created the file")
	}
}
