package agentd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// startRun runs the daemon as the product does (Run: its listeners, its
// servers and their bounds) and returns the TCP address and the socket.
func startRun(t *testing.T, edit func(*Options)) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, protocol.GuestConfig{DotID: "ns/dot", Token: testToken})
	sockDir, _ := os.MkdirTemp("", "agentd")
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	o := Options{Listen: "127.0.0.1:0", Socket: filepath.Join(sockDir, "a.sock"), ConfigPath: cfg, Home: dir,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Ready: func(a net.Addr) { addr <- a }}
	if edit != nil {
		edit(&o)
	}
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addr:
		return a.String(), o.Socket
	case err := <-done:
		t.Fatalf("Run ended at once: %v", err)
	}
	return "", ""
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // io.Copy ends without error on EOF only
}

func TestUnauthenticatedConnectionsAreNotKept(t *testing.T) {
	const idle = 2 * time.Second
	addr, _ := startRun(t, func(o *Options) { o.IdleTimeout = idle })
	tests := map[string]struct {
		reason  string
		request string
		within  time.Duration
	}{
		"proof": {
			reason:  "the proof is answered without a token: the connection is kept for the host's next request only the idle timeout",
			request: "GET " + protocol.PathProof + "?nonce=" + strings.Repeat("ab", 16) + " HTTP/1.1\r\nHost: x\r\n\r\n",
			within:  idle + 2*time.Second,
		},
		"no token": {
			reason:  "a refused request must not keep its connection",
			request: "GET " + protocol.PathHealth + " HTTP/1.1\r\nHost: x\r\n\r\n",
			within:  2 * time.Second,
		},
		"silent": {
			reason:  "a connection that never sends a request head is closed after the header timeout",
			request: "",
			within:  HeaderTimeout + 3*time.Second,
		},
		"half a head": {
			reason:  "a head sent slowly is closed after the header timeout",
			request: "GET " + protocol.PathHealth + " HTTP/1.1\r\nHost: x\r\n",
			within:  HeaderTimeout + 3*time.Second,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			if !closedWithin(c, tc.within) {
				t.Errorf("%s: the connection is still open after %v", tc.reason, tc.within)
			}
		})
	}
}

func TestIdleAuthenticatedConnectionIsClosed(t *testing.T) {
	const idle = 2 * time.Second
	addr, _ := startRun(t, func(o *Options) { o.IdleTimeout = idle })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", protocol.PathHealth, testToken)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health = %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if !closedWithin(c, idle+3*time.Second) {
		t.Errorf("a kept-alive connection with no request is still open after %v", idle+3*time.Second)
	}
}

func TestCallerMistakesAreAnsweredAsSuch(t *testing.T) {
	r := newRig(t, nil)
	tests := map[string]struct {
		reason     string
		method     string
		path       string
		body       string
		local      bool
		wantStatus int
		wantCode   string
		wantAllow  string
	}{
		"exec with a second JSON value": {
			reason: "a body is one JSON value", method: "POST", path: protocol.PathExec,
			body: `{"command":"true"} {"command":"rm -rf /"}`, wantStatus: 400, wantCode: protocol.ErrInvalidRequest,
		},
		"exec with trailing garbage": {
			reason: "a body is one JSON value", method: "POST", path: protocol.PathExec,
			body: `{"command":"true"}x`, wantStatus: 400, wantCode: protocol.ErrInvalidRequest,
		},
		"exec with an unknown field": {
			reason: "a misspelt option is refused", method: "POST", path: protocol.PathExec,
			body: `{"command":"true","timout_ms":5}`, wantStatus: 400, wantCode: protocol.ErrInvalidRequest,
		},
		"exec with a key in another case": {
			reason: "keys are matched exactly, as an unknown field is refused", method: "POST", path: protocol.PathExec,
			body: `{"Command":"true"}`, wantStatus: 400, wantCode: protocol.ErrInvalidRequest,
		},
		"exec over the limit": {
			reason: "a body over its limit is too_large", method: "POST", path: protocol.PathExec,
			body: `{"command":"` + strings.Repeat("x", 1<<20) + `"}`, wantStatus: 413, wantCode: protocol.ErrTooLarge,
		},
		"a file name of 5,000 characters": {
			reason: "a name the file system refuses as too long is the caller's mistake", method: "GET",
			path: protocol.PathFiles + "?path=" + strings.Repeat("n", 5000), wantStatus: 400, wantCode: protocol.ErrInvalidRequest,
		},
		"put of a file name of 5,000 characters": {
			reason: "a name the file system refuses as too long is the caller's mistake", method: "PUT",
			path: protocol.PathFiles + "?path=" + strings.Repeat("n", 5000), body: "x", wantStatus: 400, wantCode: protocol.ErrInvalidRequest,
		},
		"POST on a GET route": {
			reason: "a known path with the wrong method is 405 with Allow", method: "POST", path: protocol.PathHealth,
			wantStatus: 405, wantCode: protocol.ErrMethodNotAllowed, wantAllow: "GET, HEAD",
		},
		"GET on the poweroff route": {
			reason: "a known path with the wrong method is 405 with Allow", method: "GET", path: protocol.PathPoweroff,
			wantStatus: 405, wantCode: protocol.ErrMethodNotAllowed, wantAllow: "POST",
		},
		"POST on the proof": {
			reason: "the proof is a route too", method: "POST", path: protocol.PathProof,
			wantStatus: 405, wantCode: protocol.ErrMethodNotAllowed, wantAllow: "GET, HEAD",
		},
		"DELETE on files, local": {
			reason: "the engine's door answers the same way", method: "DELETE", path: protocol.PathFiles, local: true,
			wantStatus: 405, wantCode: protocol.ErrMethodNotAllowed, wantAllow: "GET, HEAD, PUT",
		},
		"unknown path": {
			reason: "an unknown path stays 404", method: "GET", path: "/v1/nothing",
			wantStatus: 404, wantCode: protocol.ErrNotFound,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := r.do(tc.method, tc.path, strings.NewReader(tc.body), !tc.local, tc.local)
			if a.status != tc.wantStatus || a.code() != tc.wantCode || a.header.Get("Allow") != tc.wantAllow {
				t.Errorf("%s\n%s %s = %d %s Allow %q, want %d %s Allow %q (%s)", tc.reason, tc.method, tc.path, a.status, a.code(), a.header.Get("Allow"), tc.wantStatus, tc.wantCode, tc.wantAllow, a.body)
			}
		})
	}
}

func TestMalformedChunkedUploadIsTheCallersMistake(t *testing.T) {
	r := newRig(t, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(r.tcp.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT %s?path=up.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n", protocol.PathFiles, testToken)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(b), protocol.ErrInvalidRequest) {
		t.Errorf("a malformed chunked body = %d %s, want 400 %s", resp.StatusCode, b, protocol.ErrInvalidRequest)
	}
	if _, err := os.Stat(filepath.Join(r.home, "up.txt")); err == nil {
		t.Error("half an upload was renamed into place")
	}
}

func TestListingNeverStatsOutsideHome(t *testing.T) {
	r := newRig(t, nil)
	outside := filepath.Join(r.dir, "outside.bin")
	if err := os.WriteFile(outside, make([]byte, 12345), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	os.Chtimes(outside, old, old)
	os.Symlink(outside, filepath.Join(r.home, "out"))
	os.WriteFile(filepath.Join(r.home, "in.txt"), []byte("abc"), 0o644)
	os.Symlink("in.txt", filepath.Join(r.home, "in-link"))
	a := r.tcpDo("GET", protocol.PathFilesList+"?path=.", nil)
	var got protocol.ListResponse
	a.decode(t, &got)
	entries := map[string]protocol.ListEntry{}
	for _, e := range got.Entries {
		entries[e.Name] = e
	}
	if e := entries["out"]; e.Type != protocol.EntryOther || e.Size == 12345 || strings.HasPrefix(e.Mtime, "2001") {
		t.Errorf("a link out of home lists as %+v: want other with nothing of its target", e)
	}
	if e := entries["in-link"]; e.Type != protocol.EntryFile || e.Size != 3 {
		t.Errorf("a link inside home lists as %+v: want the file it points to", e)
	}
	// The engine's door is not confined: it lists the target.
	a = r.localDo("GET", protocol.PathFilesList+"?path="+r.home, nil)
	a.decode(t, &got)
	for _, e := range got.Entries {
		if e.Name == "out" && (e.Type != protocol.EntryFile || e.Size != 12345) {
			t.Errorf("the local door lists the link as %+v, want its target", e)
		}
	}
}

func TestLoginShellKeepsTheDaemonsPath(t *testing.T) {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("no bash")
	}
	r := newRig(t, func(c *Config) { c.Shell = "/bin/bash" })
	// A login profile that sets PATH, as Debian's /etc/profile does.
	os.WriteFile(filepath.Join(r.home, ".bash_profile"), []byte("PATH=/usr/bin:/bin\nexport PATH\n"), 0o644)
	a := r.tcpDo("POST", protocol.PathExec, jsonBody(protocol.ExecRequest{Command: `echo "$PATH"`}))
	var got protocol.ExecResponse
	a.decode(t, &got)
	if want := r.home + "/.local/bin:"; !strings.HasPrefix(got.Stdout, want) {
		t.Errorf("PATH in a command = %q, want it to start with %q (ref 4.1)", got.Stdout, want)
	}
}

func TestProvenConnectionCarriesTheHostsRequests(t *testing.T) {
	addr, _ := startRun(t, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET %s?nonce=%s HTTP/1.1\r\nHost: x\r\n\r\n", protocol.PathProof, strings.Repeat("ab", 16))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("proof = %v %v (close %v)", resp, err, resp != nil && resp.Close)
	}
	io.Copy(io.Discard, resp.Body)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", protocol.PathHealth, testToken)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health on the proven connection = %v %v", resp, err)
	}
}
