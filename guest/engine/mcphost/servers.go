package mcphost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

var functionNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ModelTool is a connected server's tool as the engine offers it: under the
// model's name, with the server it belongs to.
type ModelTool struct {
	Server string
	Tool
}

// Servers runs the MCP servers a Dot's config declares, one Server each
// (ref 8.3): a server is started when it is declared, and again when a config
// or a secret changes its entry (that server only); a server whose permission
// is deny is not started at all.
type Servers struct {
	launcher Launcher
	backoff  Backoff
	log      *slog.Logger
	// dial makes a server's dialer; the launcher's unless a test replaced it
	// (an in-memory server).
	dial func(name string, entry protocol.MCPServerConfig, secrets map[string]string) Dialer
	// toolName is the model's name of a server's tool (tools.MCPToolName,
	// passed in so the naming stays with the permission table).
	toolName func(server, tool string) string

	mu      sync.Mutex
	entries map[string]*entry
	closed  bool
}

type entry struct {
	key    string  // what the server was started from, hashed
	srv    *Server // nil when it is not started (denied)
	static Status  // the status of a server that is not started
	schema map[string]*jsonschema.Resolved
}

// ServersOptions make a Servers.
type ServersOptions struct {
	Launcher Launcher
	Backoff  Backoff
	Log      *slog.Logger
	// ToolName is the model's name of a server's tool.
	ToolName func(server, tool string) string
	// Dial, for tests, replaces the launcher.
	Dial func(name string, entry protocol.MCPServerConfig, secrets map[string]string) Dialer
}

// NewServers returns an empty set of servers; Apply starts them.
func NewServers(o ServersOptions) *Servers {
	s := &Servers{launcher: o.Launcher, backoff: o.Backoff, log: o.Log, dial: o.Dial, toolName: o.ToolName, entries: map[string]*entry{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.dial == nil {
		s.dial = func(_ string, e protocol.MCPServerConfig, secrets map[string]string) Dialer {
			return s.launcher.Dialer(e, secrets)
		}
	}
	return s
}

// Apply starts, restarts and stops servers to match cfg and the secrets the
// host pushed; a server whose entry, secrets and permission did not change is
// left as it is. A nil cfg stops every server.
func (s *Servers) Apply(cfg *protocol.RuntimeConfig, secrets map[string]map[string]string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	var stop []*Server
	want := map[string]bool{}
	if cfg != nil {
		for _, name := range cfg.ServerNames() {
			want[name] = true
			e := cfg.MCPServers[name]
			own := map[string]string{}
			for _, n := range e.Secrets {
				if v, ok := secrets[name][n]; ok {
					own[n] = v
				}
			}
			denied := cfg.Decision(protocol.MCPPermissionPrefix+name) == protocol.Deny
			key := fingerprint(e, own, denied)
			if old, ok := s.entries[name]; ok && old.key == key {
				continue
			} else if ok && old.srv != nil {
				stop = append(stop, old.srv)
			}
			ne := &entry{key: key}
			var missing []string
			for _, n := range e.Secrets {
				if _, ok := own[n]; !ok {
					missing = append(missing, n)
				}
			}
			switch {
			case denied:
				ne.static = Status{State: protocol.MCPFailed, Error: fmt.Sprintf("not started: its permission %s%s is deny", protocol.MCPPermissionPrefix, name)}
			case len(missing) > 0:
				// It waits for the host's push of its secrets (a new key).
				ne.static = Status{State: protocol.MCPFailed, Error: "not started: " + errNotSet{missing}.Error()}
			default:
				values := make([]string, 0, len(own))
				for _, v := range own {
					values = append(values, v)
				}
				ne.srv = StartServer(ServerOptions{
					Name: name, Dial: s.dial(name, e, own), Backoff: s.backoff, Secrets: values, Log: s.log,
					StartupTimeout: time.Duration(e.StartupTimeoutS) * time.Second,
					Timeout:        time.Duration(e.TimeoutS) * time.Second,
				})
			}
			s.entries[name] = ne
		}
	}
	for name, e := range s.entries {
		if !want[name] {
			if e.srv != nil {
				stop = append(stop, e.srv)
			}
			delete(s.entries, name)
		}
	}
	s.mu.Unlock()
	// A server being replaced ends on its own time (up to the relay's
	// terminate wait); nothing waits for it.
	for _, srv := range stop {
		go srv.Close()
	}
}

// fingerprint identifies what a server was started from. The secrets are
// hashed with the entry, in memory only, so a changed secret restarts the
// server without the value being kept anywhere but where it already is.
func fingerprint(e protocol.MCPServerConfig, secrets map[string]string, denied bool) string {
	b, _ := json.Marshal(struct {
		E protocol.MCPServerConfig
		S map[string]string
		D bool
	}{e, secrets, denied})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Ready starts again the servers that failed for a reason that may have gone
// and waits for every server being started, each bounded by its own startup
// timeout, or until ctx ends.
func (s *Servers) Ready(ctx context.Context) {
	srvs := s.servers()
	for _, srv := range srvs {
		srv.Retry()
	}
	for _, srv := range srvs {
		srv.Wait(ctx)
	}
}

func (s *Servers) servers() []*Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Server, 0, len(s.entries))
	for _, name := range s.namesLocked() {
		if e := s.entries[name]; e.srv != nil {
			out = append(out, e.srv)
		}
	}
	return out
}

func (s *Servers) namesLocked() []string {
	names := make([]string, 0, len(s.entries))
	for n := range s.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Status is every declared server by name (GET /tools).
func (s *Servers) Status() []protocol.MCPServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]protocol.MCPServerStatus, 0, len(s.entries))
	for _, name := range s.namesLocked() {
		e := s.entries[name]
		st := e.static
		if e.srv != nil {
			st = e.srv.Status()
		}
		ps := protocol.MCPServerStatus{Name: name, State: st.State, Tools: len(st.Tools)}
		if st.Error != "" {
			msg := st.Error
			ps.Error = &msg
		}
		out = append(out, ps)
	}
	return out
}

// Instructions are what each connected server said at initialize, by name,
// for the system prompt.
func (s *Servers) Instructions() map[string]string {
	out := map[string]string{}
	for name, st := range s.statuses() {
		if st.State == protocol.MCPConnected && st.Instructions != "" {
			out[name] = st.Instructions
		}
	}
	return out
}

func (s *Servers) statuses() map[string]Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Status{}
	for name, e := range s.entries {
		if e.srv != nil {
			out[name] = e.srv.Status()
		} else {
			out[name] = e.static
		}
	}
	return out
}

// Tools are the tools of the connected servers, by server name then in the
// order each server listed them, under the model's names.
func (s *Servers) Tools() []ModelTool {
	st := s.statuses()
	names := make([]string, 0, len(st))
	for n := range st {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []ModelTool
	for _, n := range names {
		if st[n].State != protocol.MCPConnected {
			continue
		}
		for _, t := range st[n].Tools {
			mt := ModelTool{Server: n, Tool: t}
			mt.Name = s.toolName(n, t.Name)
			if !functionNameRe.MatchString(mt.Name) {
				// A model's function name is [A-Za-z0-9_-], at most 64: a tool
				// whose name does not fit cannot be offered, or a request
				// carrying it would be refused whole.
				continue
			}
			out = append(out, mt)
		}
	}
	return out
}

// lookup finds a connected server's tool by the model's name.
func (s *Servers) lookup(name string) (*Server, *entry, Tool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for server, e := range s.entries {
		if e.srv == nil {
			continue
		}
		for _, t := range e.srv.Status().Tools {
			if s.toolName(server, t.Name) == name {
				return e.srv, e, t, true
			}
		}
	}
	return nil, nil, Tool{}, false
}

// Validate checks a call's arguments against the tool's input schema, as
// the table's tools are checked before the gate sees a call (ref 8.3).
func (s *Servers) Validate(name string, raw json.RawMessage) (map[string]any, error) {
	_, e, t, ok := s.lookup(name)
	if !ok {
		return nil, fmt.Errorf("there is no connected MCP tool named %q", name)
	}
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, fmt.Errorf("the arguments of %s are not a JSON object: %v", name, err)
	}
	if args == nil {
		args = map[string]any{}
	}
	rs := s.resolved(e, t)
	if rs == nil {
		// A schema the validator cannot read is the server's to apply; it
		// checks its own input.
		return args, nil
	}
	if err := rs.Validate(args); err != nil {
		return nil, fmt.Errorf("invalid arguments for %s: %v", name, err)
	}
	return args, nil
}

func (s *Servers) resolved(e *entry, t Tool) *jsonschema.Resolved {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keyed by the schema too: a server that lists its tools again may
	// change one.
	key := t.Name + "\x00" + string(t.InputSchema)
	if rs, ok := e.schema[key]; ok {
		return rs
	}
	var sch jsonschema.Schema
	var rs *jsonschema.Resolved
	if err := json.Unmarshal(t.InputSchema, &sch); err == nil {
		rs, _ = sch.Resolve(nil)
	}
	if e.schema == nil {
		e.schema = map[string]*jsonschema.Resolved{}
	}
	e.schema[key] = rs
	return rs
}

// Call runs a connected server's tool by the model's name of it.
func (s *Servers) Call(ctx context.Context, name string, args json.RawMessage) CallResult {
	srv, _, t, ok := s.lookup(name)
	if !ok {
		return CallResult{Text: fmt.Sprintf("There is no connected MCP tool named %q. The call did not run.", name)}
	}
	return srv.Call(ctx, t.Name, args)
}

// Close stops every server and waits for them to end.
func (s *Servers) Close() {
	s.mu.Lock()
	s.closed = true
	var srvs []*Server
	for _, e := range s.entries {
		if e.srv != nil {
			srvs = append(srvs, e.srv)
		}
	}
	s.entries = map[string]*entry{}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, srv := range srvs {
		wg.Add(1)
		go func() { defer wg.Done(); srv.Close() }()
	}
	wg.Wait()
}
