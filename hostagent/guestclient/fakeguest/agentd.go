package fakeguest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
)

// AgentdFns answers the dot-agentd routes that the Dots API reads a guest
// with: files, the screen, and the engine's tools and skills. A function
// that is nil answers as an empty guest would.
type AgentdFns struct {
	// ReadFn answers GET /v1/files?path= with the file's bytes.
	ReadFn func(ctx context.Context, t guestclient.Target, p string) ([]byte, error)
	// ListFn answers GET /v1/files/list?path=.
	ListFn func(ctx context.Context, t guestclient.Target, p string) (protocol.ListResponse, error)
	// ScreenshotFn answers GET /v1/screenshot with a PNG.
	ScreenshotFn func(ctx context.Context, t guestclient.Target) ([]byte, error)
	// ToolsFn and SkillsFn answer the engine's GET /tools and /skills.
	ToolsFn  func(ctx context.Context, t guestclient.Target) (protocol.Tools, error)
	SkillsFn func(ctx context.Context, t guestclient.Target) (protocol.Skills, error)
}

// FakePNG is the fake guest's screen: a PNG signature and nothing more.
var FakePNG = []byte("\x89PNG\r\n\x1a\nfake-screen")

// agentd answers a dot-agentd route other than the event stream; ok is
// false for a route it does not have.
func (f AgentdFns) agentd(ctx context.Context, t guestclient.Target, method string, u *url.URL) (resp *http.Response, ok bool) {
	if method != http.MethodGet {
		return nil, false
	}
	var body any
	var raw []byte
	var err error
	switch u.Path {
	case protocol.PathFiles:
		if f.ReadFn == nil {
			err = statusError(http.StatusNotFound, protocol.ErrNotFound, "no such file")
		} else {
			raw, err = f.ReadFn(ctx, t, u.Query().Get(protocol.QueryPath))
		}
	case protocol.PathFilesList:
		list := protocol.ListResponse{Entries: []protocol.ListEntry{}}
		if f.ListFn != nil {
			list, err = f.ListFn(ctx, t, u.Query().Get(protocol.QueryPath))
		}
		body = list
	case protocol.PathScreenshot:
		raw = FakePNG
		if f.ScreenshotFn != nil {
			raw, err = f.ScreenshotFn(ctx, t)
		}
	case protocol.AgentRoutePrefix + protocol.RouteTools:
		tools := protocol.Tools{Tools: []protocol.ToolInfo{}, MCPServers: []protocol.MCPServerStatus{}}
		if f.ToolsFn != nil {
			tools, err = f.ToolsFn(ctx, t)
		}
		body = tools
	case protocol.AgentRoutePrefix + protocol.RouteSkills:
		skills := protocol.Skills{Skills: []protocol.Skill{}}
		if f.SkillsFn != nil {
			skills, err = f.SkillsFn(ctx, t)
		}
		body = skills
	default:
		return nil, false
	}
	var se *guestclient.StatusError
	switch {
	case errors.As(err, &se):
		b, _ := json.Marshal(protocol.ErrorResponse{Error: se.Code, Message: se.Message})
		return answer(se.Status, io.NopCloser(bytes.NewReader(b))), true
	case err != nil:
		return answer(http.StatusInternalServerError, io.NopCloser(strings.NewReader(`{"error":"internal"}`))), true
	case body != nil:
		raw, _ = json.Marshal(body)
	}
	resp = answer(http.StatusOK, io.NopCloser(bytes.NewReader(raw)))
	resp.ContentLength = int64(len(raw))
	return resp, true
}

func statusError(status int, code, msg string) error {
	return &guestclient.StatusError{Status: status, Code: code, Message: msg}
}

// WriteFile puts a file in the home of the guest on port and pid, as the
// Dot would write it (p absolute, under /home/dot).
func (e *Engine) WriteFile(port, pid int, p string, data []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.state(guestclient.Target{Port: port, PID: pid})
	if s.files == nil {
		s.files = map[string][]byte{}
	}
	s.files[path.Clean(p)] = append([]byte(nil), data...)
}

// readFile, listFiles: the guest's home as dot-agentd's TCP routes serve
// it, confined to /home/dot.
func (e *Engine) readFile(t guestclient.Target, p string) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p = path.Clean(p)
	if p != protocol.DefaultDotHome && !strings.HasPrefix(p, protocol.DefaultDotHome+"/") {
		return nil, statusError(http.StatusForbidden, protocol.ErrOutsideHome, p+" is not under "+protocol.DefaultDotHome)
	}
	s := e.state(t)
	if b, ok := s.files[p]; ok {
		return b, nil
	}
	for f := range s.files {
		if strings.HasPrefix(f, p+"/") {
			return nil, statusError(http.StatusBadRequest, protocol.ErrIsDirectory, p+" is a directory")
		}
	}
	return nil, statusError(http.StatusNotFound, protocol.ErrNotFound, "no such file or directory")
}

func (e *Engine) listFiles(t guestclient.Target, p string) (protocol.ListResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p = path.Clean(p)
	if p != protocol.DefaultDotHome && !strings.HasPrefix(p, protocol.DefaultDotHome+"/") {
		return protocol.ListResponse{}, statusError(http.StatusForbidden, protocol.ErrOutsideHome, p+" is not under "+protocol.DefaultDotHome)
	}
	s := e.state(t)
	if _, ok := s.files[p]; ok {
		return protocol.ListResponse{}, statusError(http.StatusBadRequest, protocol.ErrNotDirectory, p+" is a file")
	}
	seen := map[string]protocol.ListEntry{}
	mtime := time.Unix(0, 0).UTC().Format(time.RFC3339)
	for f, b := range s.files {
		rest, ok := strings.CutPrefix(f, p+"/")
		if !ok {
			continue
		}
		if dir, _, nested := strings.Cut(rest, "/"); nested {
			seen[dir] = protocol.ListEntry{Name: dir, Type: protocol.EntryDir, Mtime: mtime}
		} else {
			seen[rest] = protocol.ListEntry{Name: rest, Type: protocol.EntryFile, Size: int64(len(b)), Mtime: mtime}
		}
	}
	if len(seen) == 0 && p != protocol.DefaultDotHome {
		return protocol.ListResponse{}, statusError(http.StatusNotFound, protocol.ErrNotFound, "no such file or directory")
	}
	out := protocol.ListResponse{Entries: []protocol.ListEntry{}}
	for _, en := range seen {
		out.Entries = append(out.Entries, en)
	}
	sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Name < out.Entries[j].Name })
	return out, nil
}

// tools is the engine's tool table: one tool, and each MCP server of the
// configuration it was given, connected once every secret it names was
// pushed to it (a secret that arrives starts the server again), failed
// before.
func (e *Engine) tools(t guestclient.Target) protocol.Tools {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.state(t)
	out := protocol.Tools{
		Tools:      []protocol.ToolInfo{{Name: "exec", Permission: "computer.exec", Offered: true, Description: "run a command"}},
		MCPServers: []protocol.MCPServerStatus{},
	}
	if s.config == nil {
		return out
	}
	names := make([]string, 0, len(s.config.MCPServers))
	for n := range s.config.MCPServers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := protocol.MCPServerStatus{Name: n, State: protocol.MCPConnected, Tools: 1}
		for _, sec := range s.config.MCPServers[n].Secrets {
			if _, ok := s.mcpSecrets[n][sec]; !ok {
				msg := "secret " + sec + " is not set"
				st.State, st.Error, st.Tools = protocol.MCPFailed, &msg, 0
				break
			}
		}
		out.MCPServers = append(out.MCPServers, st)
	}
	return out
}

// MCPSecrets is what the guest on port and pid was last given of its MCP
// secrets, by server and name.
func (e *Engine) MCPSecrets(port, pid int) map[string]map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.guests[[2]int{port, pid}]
	if !ok {
		return nil
	}
	out := map[string]map[string]string{}
	for server, m := range s.mcpSecrets {
		out[server] = map[string]string{}
		for k, v := range m {
			out[server][k] = v
		}
	}
	return out
}
