// Package daemon wires the engine's parts into the running dot-engine: the
// environment read once at start (ref 8.8), the store, the runtime, the
// tools, the automations, memory and the API on the unix socket, and the
// stop of ref 8.7 (cron first, then the turns with the tools' grace, then a
// checkpoint).
package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/agentd/fileclient"
	"github.com/invisible-dots/invisible-dots/guest/engine/api"
	"github.com/invisible-dots/invisible-dots/guest/engine/automation"
	"github.com/invisible-dots/invisible-dots/guest/engine/browser"
	"github.com/invisible-dots/invisible-dots/guest/engine/browser/exitplace"
	"github.com/invisible-dots/invisible-dots/guest/engine/images"
	"github.com/invisible-dots/invisible-dots/guest/engine/mcphost"
	"github.com/invisible-dots/invisible-dots/guest/engine/memory"
	"github.com/invisible-dots/invisible-dots/guest/engine/openrouter"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/engine/tools"
	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Defaults of the guest layout (ref 4.2).
const (
	DefaultStateDir      = "/home/dotengine/state"
	DefaultBuiltinSkills = protocol.RuntimeMountPoint + "/" + protocol.RuntimeSkillsDir
	// EnvBuiltinSkills overrides the built-in skills directory (tests and
	// development; the runtime disk has them at DefaultBuiltinSkills).
	EnvBuiltinSkills = "INVISIBLE_DOTS_BUILTIN_SKILLS"
	// EnvTestCrashAt is a test hook: "<commit point>[:<n>]" makes the engine
	// kill itself with SIGKILL right after the n-th commit of that point
	// ("before:<point>[:<n>]" right before it). The crash tests use it; no
	// unit sets it.
	EnvTestCrashAt = "INVISIBLE_DOTS_TEST_CRASH_AT"
	// EnvTestGrace is a test hook: the tool's grace on a stop as a Go
	// duration, instead of ref 8.7's 20 s.
	EnvTestGrace = "INVISIBLE_DOTS_TEST_GRACE"
	// EnvTestMemoryQuiet is a test hook: how long no turn runs before a
	// memory pass, as a Go duration, instead of ref 8.6's 5 minutes.
	EnvTestMemoryQuiet = "INVISIBLE_DOTS_TEST_MEMORY_QUIET"
)

// Config is the environment, read once at start.
type Config struct {
	AgentSocket   string
	AgentdSocket  string
	AgentdBin     string
	Workspace     string
	StateDir      string
	NetworkCheck  string
	MCPCommand    string
	ModelUser     string
	OpenRouterURL string
	// ExitEchoURLs are the address-echo services a browser launch asks
	// (EnvExitEchoURLs; exitplace's defaults when empty).
	ExitEchoURLs []string
	// RuntimeDir is the engine's own directory that every user reads
	// ($RUNTIME_DIRECTORY, which systemd's RuntimeDirectory= sets): the
	// browsers' configuration files are written there. Empty places no
	// browser.
	RuntimeDir    string
	BuiltinSkills string
	CrashAt       string
	Grace         time.Duration
	MemoryQuiet   time.Duration
}

// ConfigFromEnv reads the environment once (ref 8.8).
func ConfigFromEnv(getenv func(string) string) Config {
	home := cmp.Or(getenv(protocol.DotHomeEnv), protocol.DefaultDotHome)
	return Config{
		AgentSocket:   cmp.Or(getenv(protocol.EnvAgentSocket), protocol.AgentSocketPath),
		AgentdSocket:  cmp.Or(getenv(protocol.EnvAgentdSocket), protocol.AgentdSocketPath),
		AgentdBin:     cmp.Or(getenv(protocol.EnvAgentdBin), protocol.RuntimeMountPoint+"/bin/dot-agentd"),
		Workspace:     cmp.Or(getenv(protocol.EnvWorkspace), path.Join(home, "workspace")),
		StateDir:      cmp.Or(getenv(protocol.EnvEngineState), DefaultStateDir),
		NetworkCheck:  getenv(protocol.EnvNetworkCheck),
		MCPCommand:    getenv(protocol.EnvMCPCommand),
		ModelUser:     cmp.Or(getenv(protocol.EnvModelUser), protocol.DefaultModelUser),
		OpenRouterURL: cmp.Or(getenv(protocol.EnvOpenRouterURL), openrouter.DefaultBaseURL),
		ExitEchoURLs:  splitList(getenv(protocol.EnvExitEchoURLs)),
		RuntimeDir:    getenv("RUNTIME_DIRECTORY"),
		BuiltinSkills: cmp.Or(getenv(EnvBuiltinSkills), DefaultBuiltinSkills),
		CrashAt:       getenv(EnvTestCrashAt),
		Grace:         parseDuration(getenv(EnvTestGrace)),
		MemoryQuiet:   parseDuration(getenv(EnvTestMemoryQuiet)),
	}
}

// browserConfigDir is where the browsers' configuration files go: under
// the engine's runtime directory, or nowhere without one.
func browserConfigDir(runtimeDir string) string {
	if runtimeDir == "" {
		return ""
	}
	return path.Join(runtimeDir, "browsers")
}

// splitList is a comma-separated list without its empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func parseDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d
}

// Deps are parts a test may replace; nil means the product's own.
type Deps struct {
	Model work.Model
	Tools work.Toolbox
	Files memory.Files
	Log   *slog.Logger
	// MCPDial, when set, reaches the declared MCP servers instead of the
	// relay (a test's in-memory servers); it applies to the product's
	// toolbox only, when Tools is nil.
	MCPDial func(name string, entry protocol.MCPServerConfig, secrets map[string]string) mcphost.Dialer
	// BrowserDial, when set, reaches the browser's MCP server instead of
	// the relay (a test's fake @playwright/mcp).
	BrowserDial func(cfg protocol.MCPServerConfig, secrets map[string]string) mcphost.Dialer
	// BrowserWatch, when set, watches the browser a launch opened instead
	// of looking for its Chromium (browser.WatchChromium); with BrowserDial
	// set and this nil, nothing is watched (a fake server runs no Chromium).
	BrowserWatch func(ctx context.Context, profile string) (browser.Process, error)
	// Ready, when set, is called once the API serves.
	Ready func()
}

// Run serves the Dot until ctx ends (SIGTERM), then stops as ref 8.7 says.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	u, err := user.Lookup(cfg.ModelUser)
	if err != nil {
		return fmt.Errorf("the model's user %q does not exist (%s): the engine refuses every connection of that user, so it must exist: %w",
			cfg.ModelUser, protocol.EnvModelUser, err)
	}
	modelUID, err := strconv.Atoi(u.Uid)
	if err != nil {
		return fmt.Errorf("uid %q of user %q is not a number", u.Uid, cfg.ModelUser)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("make the engine's state directory: %w", err)
	}
	st, err := store.Open(ctx, filepath.Join(cfg.StateDir, store.FileName))
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.CrashAt != "" {
		installCrashHook(st, cfg.CrashAt)
	}
	home := path.Dir(cfg.Workspace)

	// The browser identities run the image's @playwright/mcp through the
	// same relay and MCP client as the declared servers (ref 6, 8.3).
	launcher := mcphost.Launcher{RelayPath: cfg.AgentdBin, AgentdSocket: cfg.AgentdSocket, Cwd: home, Path: relayPath,
		TerminateAfter: time.Second}
	browserDial := deps.BrowserDial
	if browserDial == nil {
		browserDial = launcher.Dialer
	}
	browserWatch := deps.BrowserWatch
	if browserWatch == nil && deps.BrowserDial != nil {
		browserWatch = func(context.Context, string) (browser.Process, error) {
			return nil, errors.New("the test's browser server runs no Chromium")
		}
	}
	browsers := browser.New(browser.Options{
		Store: st, Command: cfg.MCPCommand, Forwarder: cfg.AgentdBin, Home: home, Dial: browserDial,
		Remove: browser.RelayRemover(launcher), Watch: browserWatch, Log: log,
		Place: func(ctx context.Context, proxy string) exitplace.Place {
			return exitplace.Learn(ctx, exitplace.Options{EchoURLs: cfg.ExitEchoURLs}, proxy)
		},
		ConfigDir: browserConfigDir(cfg.RuntimeDir),
		// The relay's input ends, then SIGTERM and SIGKILL, each after
		// TerminateAfter.
		ServerEnd: 2 * launcher.TerminateAfter,
	})
	// A stop closes the browsers (work.Options.Browsers); this is the last
	// word when the engine ends some other way, bounded as a stop's.
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), work.BrowserCloseOnStop)
		defer cancel()
		browsers.CloseAll(cctx)
	}()
	if cfg.MCPCommand != "" {
		// The page tools are offered once the server said what they are; a
		// probe that fails (dot-agentd still starting) is tried again, and
		// a launch reads them too.
		go func() {
			wait := 2 * time.Second
			for try := 1; ; try++ {
				err := browsers.Probe(ctx)
				if err == nil || ctx.Err() != nil {
					return
				}
				if try == 5 {
					log.Warn("the browser's page tools are not offered until an identity is launched", "err", err)
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				wait *= 2
			}
		}()
	}

	late := &lateKicker{}
	cron := automation.New(st, late, nil, log)
	var eng *work.Engine
	var runner *tools.Runner
	var mcps *mcphost.Servers
	toolbox := deps.Tools
	if toolbox == nil {
		runner = tools.NewRunner(tools.Env{AgentdSocket: cfg.AgentdSocket, RelayPath: cfg.AgentdBin, Home: home,
			Workspace: cfg.Workspace, Cron: cron, Term: os.Getenv("TERM"), DeclaredMCPServers: func() []string {
				if c := eng.Config(); c != nil {
					return c.ServerNames()
				}
				return nil
			}, CanAsk: func() []string {
				if c := eng.Config(); c != nil {
					return c.CanAsk()
				}
				return nil
			}})
		defer runner.Close()
		// The declared MCP servers run through the same relay as the model's
		// commands, as dot in its home (ref 8.3).
		mcps = mcphost.NewServers(mcphost.ServersOptions{
			// A server gets a second after its input ends, then SIGTERM, then
			// SIGKILL: at most about three seconds of the stop's budget (ref 8.7).
			Launcher: launcher,
			Log:      log, ToolName: tools.MCPToolName, Dial: deps.MCPDial,
		})
		defer mcps.Close()
		toolbox = Toolbox{Runner: runner, MCP: mcps, Browser: browsers}
	}
	model := deps.Model
	if model == nil {
		model = openrouter.New(cfg.OpenRouterURL, &http.Client{})
	}
	files := deps.Files
	if files == nil {
		// Memory reads and writes the Dot's files around every turn: a stuck
		// dot-agentd must not hold the turn, so each request is bounded.
		files = fileclient.New(cfg.AgentdSocket, 30*time.Second)
	}
	mem := &memory.Memory{Files: files, Home: home, BuiltinSkills: cfg.BuiltinSkills, Log: log,
		Target: toolbox.Target, BrowserInstructions: browsers.Instructions, Secrets: func() []string {
			return append(eng.SecretValues(), browsers.Proxies(context.Background())...)
		}}
	opts := work.Options{Store: st, Model: model, Tools: toolbox, Memory: mem, Log: log, Grace: cfg.Grace, Browsers: browsers}
	if mcps != nil {
		opts.MCP = mcps
		mem.MCPServers = func() []memory.MCPServer { return promptServers(mcps) }
	}
	eng = work.New(opts)
	late.set(eng)
	if err := eng.Start(ctx); err != nil {
		return err
	}

	ln, err := api.Listen(cfg.AgentSocket, modelUID)
	if err != nil {
		return err
	}
	srv := &api.Server{Engine: eng, Store: st, Skills: mem, Browsers: browsers, Log: log, Checks: []api.Checker{
		func(context.Context) protocol.HealthCheck { return protocol.HealthCheck{Name: "database", OK: true} },
		func(context.Context) protocol.HealthCheck {
			c := protocol.HealthCheck{Name: "config", OK: eng.Config() != nil}
			if !c.OK {
				c.Detail = "no config pushed yet"
			}
			return c
		},
		func(context.Context) protocol.HealthCheck {
			c := protocol.HealthCheck{Name: "openrouter_key", OK: eng.KeyConfigured()}
			if !c.OK {
				c.Detail = "no key pushed yet"
			}
			return c
		},
		networkCheck(cfg.NetworkCheck),
		func(context.Context) protocol.HealthCheck {
			c := protocol.HealthCheck{Name: "agentd_socket", OK: true}
			if fi, err := os.Stat(cfg.AgentdSocket); err != nil || fi.Mode()&os.ModeSocket == 0 {
				c.OK, c.Detail = false, "dot-agentd's socket is not there"
			}
			return c
		},
	}}
	// Requests live under baseCtx, which ends at the stop: an event stream
	// never ends on its own and would hold the shutdown otherwise.
	baseCtx, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	hs := ln.NewServer(srv.Handler())
	hs.BaseContext = func(net.Listener) context.Context { return baseCtx }
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

	cronCtx, stopCron := context.WithCancel(ctx)
	var cronDone sync.WaitGroup
	cronDone.Add(1)
	go func() {
		defer cronDone.Done()
		_ = cron.Run(cronCtx)
	}()
	cronDone.Add(1)
	go func() {
		defer cronDone.Done()
		work.NewMemoryPass(eng, mem, cfg.MemoryQuiet).Run(cronCtx)
	}()
	if deps.Ready != nil {
		deps.Ready()
	}
	log.Info("engine serving", "socket", cfg.AgentSocket)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("api stopped", "err", err)
		}
	}
	// The cron timer and the memory pass end before the engine does, so no
	// firing falls on a stopped engine (ref 8.8) and a pass is cut (ref 8.6).
	stopCron()
	cronDone.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if err := eng.Stop(stopCtx, false); err != nil {
		log.Error("stop engine", "err", err)
	}
	endRequests()
	shutCtx, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	_ = hs.Shutdown(shutCtx)
	hs.Close()
	_ = os.Remove(cfg.AgentSocket)
	return nil
}

// networkCheck reaches the host INVISIBLE_DOTS_NETWORK_CHECK names (host or
// host:port, port 443 by default) over TCP, at most once a minute: /health
// is polled, and a check must not cost a connection each time.
func networkCheck(target string) api.Checker {
	var mu sync.Mutex
	var last protocol.HealthCheck
	var at time.Time
	return func(ctx context.Context) protocol.HealthCheck {
		if target == "" {
			return protocol.HealthCheck{Name: "network", OK: true, Detail: "no network check configured"}
		}
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < time.Minute {
			return last
		}
		addr := target
		if _, _, err := net.SplitHostPort(addr); err != nil {
			addr = net.JoinHostPort(addr, "443")
		}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		var d net.Dialer
		conn, err := d.DialContext(dctx, "tcp", addr)
		last = protocol.HealthCheck{Name: "network", OK: err == nil}
		if err != nil {
			last.Detail = fmt.Sprintf("%s is not reachable from the computer: %v", addr, err)
		} else {
			conn.Close()
		}
		at = time.Now()
		return last
	}
}

type lateKicker struct {
	mu  sync.Mutex
	eng *work.Engine
}

func (l *lateKicker) set(e *work.Engine) { l.mu.Lock(); l.eng = e; l.mu.Unlock() }
func (l *lateKicker) Kick() {
	l.mu.Lock()
	e := l.eng
	l.mu.Unlock()
	if e != nil {
		e.Kick()
	}
}

// installCrashHook kills the process with SIGKILL at a commit point (the
// crash tests' hook; see EnvTestCrashAt).
func installCrashHook(st *store.Store, spec string) {
	before := false
	if rest, ok := strings.CutPrefix(spec, "before:"); ok {
		before, spec = true, rest
	}
	point, nth := spec, 1
	if p, n, ok := strings.Cut(spec, ":"); ok {
		point = p
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			nth = v
		}
	}
	var mu sync.Mutex
	seen := 0
	hook := func(p string) {
		if p != point {
			return
		}
		mu.Lock()
		seen++
		hit := seen == nth
		mu.Unlock()
		if hit {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal arrives; nothing more runs
		}
	}
	if before {
		st.BeforeCommit = hook
	} else {
		st.AfterCommit = hook
	}
}

// promptServers is what the system prompt tells of the declared servers.
func promptServers(mcps *mcphost.Servers) []memory.MCPServer {
	instructions := mcps.Instructions()
	var out []memory.MCPServer
	for _, st := range mcps.Status() {
		s := memory.MCPServer{Name: st.Name, Connected: st.State == protocol.MCPConnected, Instructions: instructions[st.Name]}
		switch {
		case st.Error != nil:
			s.Error = *st.Error
		case !s.Connected:
			s.Error = "it is still starting"
		}
		out = append(out, s)
	}
	return out
}

// relayPath is PATH of the relay's own environment (ref 8.8); the program's
// environment is dot's login shell's, built by dot-agentd.
const relayPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Toolbox adapts the tool table, its runner and the declared MCP servers to
// the engine: the table's tools in its order, then the connected servers'
// tools, each under the permission the table gives its name.
type Toolbox struct {
	Runner *tools.Runner
	// MCP runs the declared servers; nil offers none of their tools.
	MCP *mcphost.Servers
	// Browser runs the identity tools and the page tools; nil offers no
	// page tool.
	Browser *browser.Manager
}

// Tools is the table in its order, then the browser's page tools, then the
// tools of the connected servers.
func (t Toolbox) Tools() []work.Tool {
	out := make([]work.Tool, 0, len(tools.Table))
	for _, s := range tools.Table {
		out = append(out, work.Tool{Name: s.Name, Permission: s.Permission, Description: s.Description, Parameters: s.Parameters,
			OfferedWhen: s.OfferedWhen, StartsTerminal: s.StartsTerminal})
	}
	if t.Browser != nil {
		for _, pt := range t.Browser.Tools() {
			perm, ok := tools.BrowserPageTools[pt.Name]
			if !ok {
				continue
			}
			out = append(out, work.Tool{Name: pt.Name, Permission: perm, Description: pt.Description, Parameters: pt.InputSchema})
		}
	}
	if t.MCP == nil {
		return out
	}
	for _, mt := range t.MCP.Tools() {
		perm, ok := tools.ToolPermission(mt.Name)
		if !ok {
			continue
		}
		out = append(out, work.Tool{Name: mt.Name, Permission: perm, Description: mt.Description, Parameters: mt.InputSchema})
	}
	return out
}

func (t Toolbox) isPage(name string) bool {
	_, ok := tools.BrowserPageTools[name]
	return ok && t.Browser != nil
}

func (t Toolbox) isMCP(name string) bool {
	_, _, ok := tools.SplitMCPToolName(name)
	return ok && t.MCP != nil
}

// Validate checks a call's arguments against its row's schema, or the
// server's input schema for a server's tool.
func (t Toolbox) Validate(name string, raw json.RawMessage) (map[string]any, error) {
	if s, ok := tools.Lookup(name); ok {
		return s.Validate(raw)
	}
	if t.isPage(name) {
		return t.Browser.Validate(name, raw)
	}
	if t.isMCP(name) {
		return t.MCP.Validate(name, raw)
	}
	return nil, fmt.Errorf("there is no tool named %q", name)
}

// Target is the tool.called target of a call; a server's tool shows none
// (ref 8.3: what its arguments are is the server's to say).
func (t Toolbox) Target(name string, args map[string]any) string {
	if t.isPage(name) {
		return pageTarget(args)
	}
	s, ok := tools.Lookup(name)
	if !ok {
		return ""
	}
	return s.TargetOf(args)
}

// pageTarget is a page tool's target: the identity, and the page a
// navigation opens without its user and password; never typed text (ref 6).
func pageTarget(args map[string]any) string {
	id, _ := args[tools.BrowserIdentityArg].(string)
	if u, ok := args["url"].(string); ok {
		id += " " + withoutUserinfo(u)
	}
	target := strings.TrimSpace(id)
	if protocol.CheckToolTarget(target) != nil {
		return ""
	}
	return target
}

// withoutUserinfo is a URL without its user and password, which an approval
// and a target never show (ref 6); the query stays, as the approver has to
// see where data goes.
func withoutUserinfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// ApprovalArguments are what an approval may show of a call; an approval of
// a server's tool shows all its arguments (ref 8.3).
func (t Toolbox) ApprovalArguments(name string, args map[string]any) map[string]any {
	if s, ok := tools.Lookup(name); ok {
		return s.ApprovalArguments(args)
	}
	if t.isPage(name) {
		out := maps.Clone(args)
		if u, ok := out["url"].(string); ok {
			out["url"] = withoutUserinfo(u)
		}
		return out
	}
	if t.isMCP(name) {
		return args
	}
	return map[string]any{}
}

// Run runs an admitted call.
func (t Toolbox) Run(ctx context.Context, name string, args json.RawMessage) work.ToolResult {
	if tools.IsBrowserIdentityTool(name) && t.Browser != nil {
		spec, _ := tools.Lookup(name)
		a, err := spec.Validate(args)
		if err != nil {
			return work.ToolResult{Text: err.Error() + "."}
		}
		r := t.Browser.IdentityTool(ctx, name, a)
		return work.ToolResult{Text: r.Text, OK: r.OK, Interrupted: !r.OK && ctx.Err() != nil}
	}
	if t.isPage(name) {
		a, err := t.Browser.Validate(name, args)
		if err != nil {
			return work.ToolResult{Text: err.Error() + "."}
		}
		r := t.Browser.Call(ctx, name, a)
		return work.ToolResult{Text: r.Text, OK: r.OK, Interrupted: !r.OK && ctx.Err() != nil, ImageURLs: r.ImageURLs}
	}
	if _, ok := tools.Lookup(name); !ok && t.isMCP(name) {
		r := t.MCP.Call(ctx, name, args)
		// A server's images are shown to the model as the browser's are
		// (ref 8.3).
		text, urls := images.Attach(r.Text, r.Images)
		return work.ToolResult{Text: text, OK: r.OK, Interrupted: !r.OK && ctx.Err() != nil, ImageURLs: urls}
	}
	r := t.Runner.Run(ctx, name, args)
	out := work.ToolResult{Text: r.Text, OK: r.OK, Interrupted: r.Interrupted, TTY: r.TTY, ImageURLs: r.ImageURLs,
		CalledArguments: r.CalledArguments}
	for _, ev := range r.Events {
		out.Events = append(out.Events, work.ToolEvent{Type: ev.Type, Data: ev.Data})
	}
	return out
}
