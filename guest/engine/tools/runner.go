package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/agentd/fileclient"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Env is what the tools need of the guest, read once by the engine at start
// (ref 8.8).
type Env struct {
	// AgentdSocket is dot-agentd's local socket (INVISIBLE_DOTS_AGENTD_SOCKET,
	// default protocol.AgentdSocketPath): the file routes and POST /v1/proc.
	AgentdSocket string
	// RelayPath is the dot-agentd binary (INVISIBLE_DOTS_AGENTD_BIN), run as
	// `dot-agentd relay ...` for every command of the model.
	RelayPath string
	// Home is the Dot's home (protocol.DefaultDotHome).
	Home string
	// Workspace is where relative paths and commands start
	// (INVISIBLE_DOTS_WORKSPACE, default Home/workspace).
	Workspace string
	// Path is the only variable of the relay's own environment (ref 8.8);
	// the command's environment is its login shell's, as dot.
	Path string
	// Term is TERM for a terminal job (the engine's, else xterm-256color).
	Term string
	// Cron is where the Dot's automations live (the engine's store).
	Cron CronStore
	// DeclaredMCPServers names the MCP servers the config declares now, so
	// add_mcp_server refuses a name already taken; nil reads as none.
	DeclaredMCPServers func() []string
	// CanAsk names the Dots the config lets this Dot ask (delegate_task);
	// nil reads as none.
	CanAsk func() []string
	// Now reads the clock (tests fix it).
	Now func() time.Time
}

// Result is a call's outcome for the model and for tool.called.
type Result struct {
	// Text is what the model reads: output, or a refusal in a clear sentence.
	Text string
	// OK is tool.called's ok: the tool did what it was asked.
	OK bool
	// Interrupted: ctx ended while the tool ran (a cancel, a stop at the end
	// of the grace), so its outcome is unknown.
	Interrupted bool
	// TTY: the call started a terminal session (tool.called tty).
	TTY bool
	// Events are outbound events the call's outcome stands for, committed
	// in the transaction that stores its result (mcp.server.added).
	Events []Event
	// ImageURLs are the images the model is shown with the result, as data:
	// URLs, in memory only: Text holds each one's placeholder (ref 6).
	ImageURLs []string
	// CalledArguments are the call's arguments for its tool.called, set
	// only by a tool the host acts on (delegate_task).
	CalledArguments json.RawMessage
}

// Event is one outbound event of a call's result.
type Event struct {
	Type string
	Data any
}

// Runner runs the table's tools. One per engine: it holds the background
// jobs, which die with the engine (ref 5.2: a relay lives as long as its
// command, and ending it ends the remote process group).
type Runner struct {
	env   Env
	files *fileclient.Client

	mu     sync.Mutex
	jobs   map[string]*job
	nextID int
	// seen is what the Dot last read or wrote of each file (a hash), for the
	// read-before-write check of write_file.
	seen map[string]string
}

// NewRunner returns a Runner over env, filling the defaults.
func NewRunner(env Env) *Runner {
	if env.AgentdSocket == "" {
		env.AgentdSocket = protocol.AgentdSocketPath
	}
	if env.Home == "" {
		env.Home = protocol.DefaultDotHome
	}
	if env.Workspace == "" {
		env.Workspace = path.Join(env.Home, "workspace")
	}
	if env.Path == "" {
		env.Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	if env.Term == "" {
		env.Term = "xterm-256color"
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	return &Runner{
		env:   env,
		files: fileclient.New(env.AgentdSocket, 0),
		jobs:  map[string]*job{},
		seen:  map[string]string{},
	}
}

// Run validates args against the table and runs the tool. It never runs a
// tool that is not in the table. The gate has decided before Run is called;
// Run decides nothing about permissions.
func (r *Runner) Run(ctx context.Context, name string, args json.RawMessage) Result {
	spec, ok := Lookup(name)
	if !ok {
		return fail(fmt.Sprintf("There is no tool named %q.", name))
	}
	a, err := spec.Validate(args)
	if err != nil {
		return fail(err.Error() + ".")
	}
	res := r.run(ctx, name, a)
	if ctx.Err() != nil && !res.OK {
		res.Interrupted = true
	}
	return res
}

func (r *Runner) run(ctx context.Context, name string, a map[string]any) Result {
	switch name {
	case "exec":
		return r.execTool(ctx, a)
	case "exec_session":
		return r.execSession(ctx, a)
	case "list_exec_sessions":
		return r.listExecSessions()
	case "read_file":
		return r.readFile(ctx, a)
	case "list_dir":
		return r.listDir(ctx, a)
	case "find_files":
		return r.findFiles(ctx, a)
	case "grep":
		return r.grep(ctx, a)
	case "write_file":
		return r.writeFile(ctx, a)
	case "edit_file":
		return r.editFile(ctx, a)
	case "apply_patch":
		return r.applyPatch(ctx, a)
	case "cron":
		return r.cron(ctx, a)
	case AddMCPServerTool:
		return r.addMCPServerCall(ctx, a)
	case DelegateTaskTool:
		return r.delegateTaskCall(a)
	case ComputerScreenshotTool:
		return r.screenshot(ctx)
	}
	return fail(fmt.Sprintf("The tool %s has no implementation.", name))
}

// Close ends every background job (the engine's stop).
func (r *Runner) Close() {
	r.mu.Lock()
	jobs := make([]*job, 0, len(r.jobs))
	for _, j := range r.jobs {
		jobs = append(jobs, j)
	}
	r.mu.Unlock()
	for _, j := range jobs {
		j.kill()
	}
}

func fail(text string) Result { return Result{Text: text} }

func ok(text string) Result { return Result{Text: text, OK: true} }

// abs resolves p against the workspace (ref 8.8: relative paths of the file
// tools resolve against /home/dot/workspace).
func (r *Runner) abs(p string) string {
	if p == "" {
		return r.env.Workspace
	}
	if p == "~" {
		return r.env.Home
	}
	if len(p) > 1 && p[:2] == "~/" {
		return path.Join(r.env.Home, p[2:])
	}
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(r.env.Workspace, p)
}
