package dotsapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

func TestHomePath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", "/home/dot", true},
		{"~", "/home/dot", true},
		{"~/notes/a.md", "/home/dot/notes/a.md", true},
		{"workspace/report.txt", "/home/dot/workspace/report.txt", true},
		{"/home/dot", "/home/dot", true},
		{"/home/dot/", "/home/dot", true},
		{"/home/dot//a/./b", "/home/dot/a/b", true},
		{"/home/dotty/a", "", false},
		{"/etc/passwd", "", false},
		{"../etc/passwd", "", false},
		{"/home/dot/../root", "", false},
		{"a/../../b", "", false},
		{"a/..", "", false},
		{"~/..", "", false},
		{"a\x00b", "", false},
	} {
		got, ok := wire.HomePath(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("HomePath(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFileTypeOf(t *testing.T) {
	for name, want := range map[string]wire.FileType{
		"/home/dot/shot.PNG":          {Kind: wire.FileImage, ContentType: "image/png"},
		"photo.jpeg":                  {Kind: wire.FileImage, ContentType: "image/jpeg"},
		"anim.gif":                    {Kind: wire.FileImage, ContentType: "image/gif"},
		"a.webp":                      {Kind: wire.FileImage, ContentType: "image/webp"},
		"page.html":                   {Kind: wire.FileText, ContentType: "text/plain; charset=utf-8"},
		"logo.svg":                    {Kind: wire.FileText, ContentType: "text/plain; charset=utf-8"},
		"notes.md":                    {Kind: wire.FileText, ContentType: "text/plain; charset=utf-8"},
		"main.go":                     {Kind: wire.FileText, ContentType: "text/plain; charset=utf-8"},
		"/home/dot/skills/x/Makefile": {Kind: wire.FileText, ContentType: "text/plain; charset=utf-8"},
		"archive.tar.gz":              {Kind: wire.FileDownload, ContentType: "application/octet-stream"},
		"report.pdf":                  {Kind: wire.FileDownload, ContentType: "application/octet-stream"},
		"noextension":                 {Kind: wire.FileDownload, ContentType: "application/octet-stream"},
	} {
		if got := wire.FileTypeOf(name); got != want {
			t.Errorf("FileTypeOf(%q) = %+v, want %+v", name, got, want)
		}
	}
}

func TestListFiles(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	entries := `{"entries":[{"name":"notes","type":"dir","size":4096,"mtime":"2026-01-02T03:04:05Z"},{"name":"a.md","type":"file","size":3,"mtime":"2026-01-02T03:04:05Z"}]}`
	e.guests.serve(runningDot, protocol.PathFilesList, func(q url.Values) *http.Response {
		switch q.Get(protocol.QueryPath) {
		case "/home/dot/link":
			return fakeAnswer(http.StatusForbidden, `{"error":"outside_home","message":"/home/dot/link resolves outside /home/dot"}`)
		case "/home/dot/a.md":
			return fakeAnswer(http.StatusBadRequest, `{"error":"not_a_directory","message":"a file"}`)
		case "/home/dot/gone":
			return fakeAnswer(http.StatusNotFound, `{"error":"not_found"}`)
		}
		return fakeAnswer(http.StatusOK, entries)
	})
	path := wire.FilesListPath(runningDot.Namespace, runningDot.Name)
	list := func(want string) func(t *testing.T, _ *http.Response, body []byte) {
		return func(t *testing.T, _ *http.Response, body []byte) {
			var got wire.FileList
			if err := jsonUnmarshalStrict(body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Path != want || len(got.Entries) != 2 || got.Entries[0].Name != "notes" || got.Entries[1].Type != protocol.EntryFile {
				t.Errorf("listing = %+v; want %s with its two entries", got, want)
			}
		}
	}
	q := func(p string) url.Values { return url.Values{"path": {p}} }
	cases := []guestCase{
		{reason: "the home when path says nothing", who: "viewer", path: path,
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/files/list?path=%2Fhome%2Fdot"), check: list("/home/dot")},
		{reason: "a path relative to the home", who: "editor", path: path, query: q("notes"),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/files/list?path=%2Fhome%2Fdot%2Fnotes"), check: list("/home/dot/notes")},
		{reason: "a ~ path", who: "viewer", path: path, query: q("~/notes/"),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/files/list?path=%2Fhome%2Fdot%2Fnotes"), check: list("/home/dot/notes")},
		{reason: "an absolute path outside home is refused without asking the guest", who: "viewer", path: path, query: q("/etc"),
			want: answer{http.StatusBadRequest, wire.CodeInvalidPath, `path "/etc" is not under /home/dot`}},
		{reason: "a .. segment is refused without asking the guest", who: "viewer", path: path, query: q("notes/../../etc"),
			want: answer{http.StatusBadRequest, wire.CodeInvalidPath, "no .. segment"}},
		{reason: "a link out of the home is the guest's outside_home, passed through", who: "viewer", path: path, query: q("link"),
			want: answer{http.StatusForbidden, protocol.ErrOutsideHome, "resolves outside"}, asks: asked(runningDot, "/v1/files/list?path=%2Fhome%2Fdot%2Flink")},
		{reason: "a file is the guest's not_a_directory", who: "viewer", path: path, query: q("a.md"),
			want: answer{http.StatusBadRequest, protocol.ErrNotDirectory, "the guest answered 400 not_a_directory"}, asks: asked(runningDot, "/v1/files/list?path=%2Fhome%2Fdot%2Fa.md")},
		{reason: "a missing directory is the guest's not_found", who: "viewer", path: path, query: q("gone"),
			want: answer{http.StatusNotFound, protocol.ErrNotFound, ""}, asks: asked(runningDot, "/v1/files/list?path=%2Fhome%2Fdot%2Fgone")},
		{reason: "an unknown parameter is refused", who: "viewer", path: path, query: url.Values{"pth": {"x"}},
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown query parameter "pth"`}},
	}
	e.run(t, append(cases, commonGuestRefusals(wire.FilesListPath, nil)...))

	// The Go client says the same.
	viewer, err := client.New(e.restConfig("viewer"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := viewer.ListFiles(context.Background(), runningDot.Namespace, runningDot.Name, "~/notes")
	if err != nil || got.Path != "/home/dot/notes" || len(got.Entries) != 2 {
		t.Errorf("ListFiles = %+v, %v", got, err)
	}
	if _, err := viewer.ListFiles(context.Background(), remoteDot.Namespace, remoteDot.Name, ""); client.CodeOf(err) != wire.CodeHostUnreachable {
		t.Errorf("ListFiles of a remote host's Dot: %v; want %s", err, wire.CodeHostUnreachable)
	}
}

// hugeFile is a file whose bytes never end: a reader counts what is read of
// it.
type hugeFile struct{ read int64 }

func (h *hugeFile) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	h.read += int64(len(p))
	return len(p), nil
}

func TestReadFile(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 100)...)
	huge := &hugeFile{}
	files := map[string][]byte{
		"/home/dot/notes.md":   []byte("# notes\n"),
		"/home/dot/page.html":  []byte("<script>alert(1)</script>"),
		"/home/dot/shot.png":   png,
		"/home/dot/report.pdf": []byte("%PDF-1.7"),
		"/home/dot/exact.bin":  bytes.Repeat([]byte{1}, wire.MaxFileBytes),
	}
	e.guests.serve(runningDot, protocol.PathFiles, func(q url.Values) *http.Response {
		p := q.Get(protocol.QueryPath)
		switch p {
		case "/home/dot/big.log":
			// A length the guest announces is believed at once.
			r := fakeAnswer(http.StatusOK, "")
			r.ContentLength = wire.MaxFileBytes + 1
			return r
		case "/home/dot/endless.txt":
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(huge), ContentLength: -1}
		case "/home/dot/notes":
			return fakeAnswer(http.StatusBadRequest, `{"error":"is_a_directory","message":"a directory"}`)
		case "/home/dot/secret-link":
			return fakeAnswer(http.StatusForbidden, `{"error":"outside_home","message":"resolves outside the home"}`)
		}
		b, ok := files[p]
		if !ok {
			return fakeAnswer(http.StatusNotFound, `{"error":"not_found","message":"no such file"}`)
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/html"}}, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b))}
	})
	path := wire.FilesPath(runningDot.Namespace, runningDot.Name)
	q := func(p string) url.Values { return url.Values{"path": {p}} }
	served := func(contentType, disposition string, want []byte) func(t *testing.T, resp *http.Response, body []byte) {
		return func(t *testing.T, resp *http.Response, body []byte) {
			for h, v := range map[string]string{
				"Content-Type":            contentType,
				"Content-Disposition":     disposition,
				"X-Content-Type-Options":  "nosniff",
				"Content-Security-Policy": "default-src 'none'; sandbox",
				"Cache-Control":           "no-store",
			} {
				if got := resp.Header.Get(h); got != v {
					t.Errorf("%s: %q, want %q", h, got, v)
				}
			}
			if !bytes.Equal(body, want) {
				t.Errorf("the body is %d bytes, want the file's %d", len(body), len(want))
			}
		}
	}
	e.run(t, append([]guestCase{
		{reason: "markdown is text, inline", who: "viewer", path: path, query: q("notes.md"),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fnotes.md"),
			check: served("text/plain; charset=utf-8", `inline; filename=notes.md`, files["/home/dot/notes.md"])},
		{reason: "html is text too, whatever the guest says its type is: a file the Dot wrote is never run", who: "viewer", path: path, query: q("~/page.html"),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fpage.html"),
			check: served("text/plain; charset=utf-8", `inline; filename=page.html`, files["/home/dot/page.html"])},
		{reason: "an image is its own type, inline", who: "viewer", path: path, query: q("/home/dot/shot.png"),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fshot.png"),
			check: served("image/png", `inline; filename=shot.png`, png)},
		{reason: "anything else is a download", who: "editor", path: path, query: q("report.pdf"),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Freport.pdf"),
			check: served("application/octet-stream", `attachment; filename=report.pdf`, files["/home/dot/report.pdf"])},
		{reason: "a file of exactly 16 MiB is read", who: "viewer", path: path, query: q("exact.bin"),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fexact.bin"),
			check: served("application/octet-stream", `attachment; filename=exact.bin`, files["/home/dot/exact.bin"])},
		{reason: "a file over 16 MiB by its length is too large", who: "viewer", path: path, query: q("big.log"),
			want: answer{http.StatusRequestEntityTooLarge, wire.CodeFileTooLarge, "/home/dot/big.log is larger than 16 MiB"}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fbig.log")},
		{reason: "a file over 16 MiB without a length is too large, and its reading stops", who: "viewer", path: path, query: q("endless.txt"),
			want: answer{http.StatusRequestEntityTooLarge, wire.CodeFileTooLarge, "larger than 16 MiB"}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fendless.txt")},
		{reason: "path is required", who: "viewer", path: path,
			want: answer{http.StatusBadRequest, wire.CodeInvalidPath, "path is required"}},
		{reason: "outside the home is refused without asking the guest", who: "viewer", path: path, query: q("/etc/shadow"),
			want: answer{http.StatusBadRequest, wire.CodeInvalidPath, "is not under /home/dot"}},
		{reason: "a .. segment is refused without asking the guest", who: "viewer", path: path, query: q("/home/dot/../root/.ssh/id_ed25519"),
			want: answer{http.StatusBadRequest, wire.CodeInvalidPath, "no .. segment"}},
		{reason: "a link that leaves the home is the guest's outside_home", who: "viewer", path: path, query: q("secret-link"),
			want: answer{http.StatusForbidden, protocol.ErrOutsideHome, "resolves outside the home"}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fsecret-link")},
		{reason: "an unknown file is the guest's not_found", who: "viewer", path: path, query: q("nothing.txt"),
			want: answer{http.StatusNotFound, protocol.ErrNotFound, "no such file"}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fnothing.txt")},
		{reason: "a directory is the guest's is_a_directory", who: "viewer", path: path, query: q("notes"),
			want: answer{http.StatusBadRequest, protocol.ErrIsDirectory, "a directory"}, asks: asked(runningDot, "/v1/files?path=%2Fhome%2Fdot%2Fnotes")},
	}, commonGuestRefusals(wire.FilesPath, url.Values{"path": {"notes.md"}})...))
	if huge.read > wire.MaxFileBytes+1<<20 {
		t.Errorf("%d bytes of the endless file were read; the reading must stop past %d", huge.read, wire.MaxFileBytes)
	}

	viewer, err := client.New(e.restConfig("viewer"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := viewer.ReadFile(context.Background(), runningDot.Namespace, runningDot.Name, "report.pdf")
	want := client.File{Data: files["/home/dot/report.pdf"], ContentType: "application/octet-stream", Disposition: "attachment", Name: "report.pdf", CSP: wire.FileCSP}
	if diff := cmp.Diff(want, f); err != nil || diff != "" {
		t.Errorf("ReadFile: %v, -want +got:\n%s", err, diff)
	}
	if _, err := viewer.ReadFile(context.Background(), runningDot.Namespace, runningDot.Name, "big.log"); client.CodeOf(err) != wire.CodeFileTooLarge || client.StatusOf(err) != http.StatusRequestEntityTooLarge {
		t.Errorf("ReadFile of a large file: %v; want 413 %s", err, wire.CodeFileTooLarge)
	}
}

func TestScreenshot(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{9}, 64)...)
	answerWith := func(status int, body []byte) {
		e.guests.serve(runningDot, protocol.PathScreenshot, func(url.Values) *http.Response {
			return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		})
	}
	path := wire.ScreenshotPath(runningDot.Namespace, runningDot.Name)
	answerWith(http.StatusOK, png)
	e.run(t, append([]guestCase{
		{reason: "the desktop as a PNG", who: "viewer", path: path,
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/screenshot"),
			check: func(t *testing.T, resp *http.Response, body []byte) {
				if ct := resp.Header.Get("Content-Type"); ct != "image/png" || !bytes.Equal(body, png) {
					t.Errorf("answer %s of %d bytes; want the guest's PNG", ct, len(body))
				}
				if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-store" {
					t.Errorf("headers %v lack nosniff or no-store", resp.Header)
				}
			}},
		{reason: "a query is refused", who: "viewer", path: path, query: url.Values{"x": {"1"}},
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "no query parameters"}},
	}, commonGuestRefusals(wire.ScreenshotPath, nil)...))

	answerWith(http.StatusServiceUnavailable, []byte(`{"error":"no_display","message":"no X display"}`))
	e.run(t, []guestCase{{reason: "the guest's no_display passes through", who: "viewer", path: path,
		want: answer{http.StatusServiceUnavailable, protocol.ErrNoDisplay, "no X display"}, asks: asked(runningDot, "/v1/screenshot")}})
	answerWith(http.StatusOK, []byte("<svg onload=alert(1)>"))
	e.run(t, []guestCase{{reason: "an answer that is no PNG is not served as one", who: "viewer", path: path,
		want: answer{http.StatusBadGateway, wire.CodeGuestError, "not a PNG"}, asks: asked(runningDot, "/v1/screenshot")}})

	viewer, err := client.New(e.restConfig("viewer"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := viewer.Screenshot(context.Background(), stoppedDot.Namespace, stoppedDot.Name); client.CodeOf(err) != wire.CodeComputerStopped || client.StatusOf(err) != http.StatusConflict {
		t.Errorf("Screenshot of a stopped computer: %v; want 409 %s", err, wire.CodeComputerStopped)
	}
}

func TestToolsAndSkills(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	tools := protocol.Tools{
		Tools:      []protocol.ToolInfo{{Name: "exec", Permission: "computer.exec", Offered: true, Description: "run a command"}},
		MCPServers: []protocol.MCPServerStatus{{Name: "time", State: protocol.MCPConnected, Tools: 2}},
	}
	skills := protocol.Skills{Skills: []protocol.Skill{{Name: "fares", Description: "find fares", Source: protocol.SkillDot, Path: "/home/dot/skills/fares/SKILL.md", Content: "# fares"}}}
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteTools, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusOK, mustJSON(t, tools))
	})
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteSkills, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusOK, mustJSON(t, skills))
	})
	decoded := func(want any, into func() any) func(t *testing.T, _ *http.Response, body []byte) {
		return func(t *testing.T, _ *http.Response, body []byte) {
			got := into()
			if err := jsonUnmarshalStrict(body, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
		}
	}
	e.run(t, append(append([]guestCase{
		{reason: "the engine's tool table", who: "viewer", path: wire.ToolsPath(runningDot.Namespace, runningDot.Name),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/agent/tools"),
			check: decoded(&tools, func() any { return &protocol.Tools{} })},
		{reason: "the Dot's skills", who: "editor", path: wire.SkillsPath(runningDot.Namespace, runningDot.Name),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, "/v1/agent/skills"),
			check: decoded(&skills, func() any { return &protocol.Skills{} })},
	}, commonGuestRefusals(wire.ToolsPath, nil)...), commonGuestRefusals(wire.SkillsPath, nil)...))

	// The engine's refusals pass through with their code and status; a
	// code that is not the protocol's keeps only the status.
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteTools, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusBadGateway, `{"error":"agent_unavailable","message":"the engine's socket does not answer"}`)
	})
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteSkills, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusConflict, `{"error":"<b>Not A Code</b>","message":"x\u0007y"}`)
	})
	e.run(t, []guestCase{
		{reason: "the engine down is dot-agentd's agent_unavailable", who: "viewer", path: wire.ToolsPath(runningDot.Namespace, runningDot.Name),
			want: answer{http.StatusBadGateway, protocol.ErrAgentUnavailable, "does not answer"}, asks: asked(runningDot, "/v1/agent/tools")},
		{reason: "a code that is not a word of the protocol is not repeated", who: "viewer", path: wire.SkillsPath(runningDot.Namespace, runningDot.Name),
			want: answer{http.StatusConflict, wire.CodeGuestError, "the guest answered 409 guest_error: xy"}, asks: asked(runningDot, "/v1/agent/skills")},
	})
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteTools, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusOK, `{"tools": "not a list"}`)
	})
	e.run(t, []guestCase{{reason: "an answer that is not the protocol's shape is not passed on", who: "viewer", path: wire.ToolsPath(runningDot.Namespace, runningDot.Name),
		want: answer{http.StatusBadGateway, wire.CodeGuestError, "not what the protocol says"}, asks: asked(runningDot, "/v1/agent/tools")}})
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteTools, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusOK, `{"Tools":[],"mcp_servers":[]}`)
	})
	e.run(t, []guestCase{{reason: "an answer with a key in another case is not the protocol's (read strictly)", who: "viewer", path: wire.ToolsPath(runningDot.Namespace, runningDot.Name),
		want: answer{http.StatusBadGateway, wire.CodeGuestError, "not what the protocol says (a field the protocol does not have"}, asks: asked(runningDot, "/v1/agent/tools")}})
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteTools, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusOK, `{"tools":[],"mcp_servers":[]} {"tools":[]}`)
	})
	e.run(t, []guestCase{{reason: "an answer of two values is not the protocol's (read strictly)", who: "viewer", path: wire.ToolsPath(runningDot.Namespace, runningDot.Name),
		want: answer{http.StatusBadGateway, wire.CodeGuestError, "not what the protocol says (more than one JSON value)"}, asks: asked(runningDot, "/v1/agent/tools")}})
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteSkills, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusConflict, `{"Error":"busy","message":"m"}`)
	})
	e.run(t, []guestCase{{reason: "a refusal that is not the protocol's keeps its status, not its code or words", who: "viewer", path: wire.SkillsPath(runningDot.Namespace, runningDot.Name),
		want: answer{http.StatusConflict, wire.CodeGuestError, "the guest answered 409 guest_error"}, asks: asked(runningDot, "/v1/agent/skills")}})

	viewer, err := client.New(e.restConfig("viewer"))
	if err != nil {
		t.Fatal(err)
	}
	e.guests.serve(runningDot, protocol.AgentRoutePrefix+protocol.RouteSkills, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusOK, mustJSON(t, skills))
	})
	got, err := viewer.Skills(context.Background(), runningDot.Namespace, runningDot.Name)
	if diff := cmp.Diff(skills, got); err != nil || diff != "" {
		t.Errorf("Skills: %v, -want +got:\n%s", err, diff)
	}
	if _, err := viewer.Tools(context.Background(), runningDot.Namespace, runningDot.Name); client.CodeOf(err) != wire.CodeGuestError {
		t.Errorf("Tools: %v; want %s", err, wire.CodeGuestError)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	if err := jsonEncode(&b, v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
