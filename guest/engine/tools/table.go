// Package tools is the Dot's tool table (ref 8.3) and the tools themselves:
// commands through `dot-agentd relay`, files through dot-agentd's local
// socket, and the Dot's own automations over a CronStore.
//
// The table is the one place that says which tools exist, the permission each
// exercises, what an approval may show of a call and what a tool.called target
// names. A tool that is not in the table is neither offered nor allowed.
// The browser's page tools and the tools of the MCP servers a Dot declares are
// not rows (what they are is each server's to say, at run time), but their
// permission is decided here, by their name (BrowserPageTools,
// ToolPermission), so the gate has one table.
package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Spec is one row of the table.
type Spec struct {
	Name string
	// Permission is one of protocol.Permissions; the gate decides every call
	// of the tool by it.
	Permission  string
	Description string
	// Parameters is the JSON schema of the arguments, as offered to the model
	// and as Validate checks them.
	Parameters json.RawMessage
	// ApprovalArgs names the arguments an approval.requested may carry; nil
	// means all of them.
	ApprovalArgs []string
	// Masked names the arguments an approval.requested shows as "***" (a
	// secret: browser_identity_create's proxy); the parked call keeps them.
	Masked []string
	// Target says what a call acts on, in one line (ref 5.4 tool.called
	// target): a name or a place, never content. "" means no target.
	Target func(args map[string]any) string
	// OfferedWhen says, beside the permission, whether the model is offered
	// the tool under a config (delegate_task: only to a Dot that may ask
	// another); nil offers it whenever its permission is not deny.
	OfferedWhen func(cfg protocol.RuntimeConfig) bool
	// StartsTerminal says whether a call starts a terminal session (ref 5.4
	// tool.called tty: exec with tty); nil means it never does. The engine
	// keeps the answer with the call's intent, so a call cut by a stop is
	// reported with it.
	StartsTerminal func(args map[string]any) bool
}

// Table is the permission table of ref 8.3 for the tools implemented now.
var Table = []Spec{
	{
		Name:       "exec",
		Permission: "computer.exec",
		Description: "Run a shell command on your computer through `bash -lc`, as the dot user, and return its output and exit code. " +
			"The command times out after `timeout` seconds (60 by default, 600 at most) and is then killed. " +
			"With `yield_time_ms` the call returns after that long while the command keeps running as a background job " +
			"(a server, a long build); read, feed or stop it with exec_session. With `tty: true` the command runs on a " +
			"pseudo-terminal (80x24), always as a background job, for interactive programs (a REPL, a prompt); you read the text of its screen.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"command": {"type": "string", "description": "The command, run with bash -lc."},
				"cwd": {"type": "string", "description": "Working directory; relative to the workspace, which is the default."},
				"timeout": {"type": "integer", "minimum": 1, "maximum": 600, "description": "Seconds before the command is killed (default 60). A background job is not bound by it."},
				"yield_time_ms": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "Return after this many milliseconds if the command still runs, leaving it running as a background job."},
				"tty": {"type": "boolean", "description": "Run on a pseudo-terminal as a background job (interactive programs)."}
			},
			"required": ["command"]
		}`),
		Target:         func(a map[string]any) string { return firstLine(str(a, "command")) },
		StartsTerminal: func(a map[string]any) bool { return boolArg(a, "tty") },
	},
	{
		Name:       "exec_session",
		Permission: "computer.exec",
		Description: "Drive a background job started by exec: send `input` to it (with `close_stdin` to end its input; on a terminal " +
			"the character with code 3 is Ctrl-C), read its new output, waiting up to `yield_time_ms` for it (1000 by default), " +
			"or `terminate` it. A terminal job's output is the text of its screen.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"session_id": {"type": "string", "description": "The job's id, as exec or list_exec_sessions gave it."},
				"input": {"type": "string", "description": "Text to write to the job's input (add \n to press Enter)."},
				"close_stdin": {"type": "boolean", "description": "End the job's input after writing (Ctrl-D on a terminal)."},
				"terminate": {"type": "boolean", "description": "Stop the job and everything it started."},
				"yield_time_ms": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "How long to wait for output before answering (default 1000); the answer comes at once when the job ends."}
			},
			"required": ["session_id"]
		}`),
		Target: func(a map[string]any) string {
			id := oneLine(str(a, "session_id"))
			switch {
			case id == "":
				return ""
			case boolArg(a, "terminate"):
				return "terminate " + id
			case str(a, "input") != "" || boolArg(a, "close_stdin"):
				return "input to " + id
			default:
				return "output of " + id
			}
		},
	},
	{
		Name:        "list_exec_sessions",
		Permission:  "computer.exec",
		Description: "List the background jobs started by exec, running or finished and not yet read, with their commands.",
		Parameters:  schema(`{"type": "object", "properties": {}}`),
		Target:      func(map[string]any) string { return "" },
	},
	{
		Name:       "read_file",
		Permission: "files.read",
		Description: "Read a text file, with line numbers, by a window of lines (`offset` is the first line, from 1; `limit` how many, " +
			"2000 by default). A binary file is reported as binary. Relative paths are relative to the workspace.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"path": {"type": "string", "description": "The file."},
				"offset": {"type": "integer", "minimum": 1, "description": "First line to read, from 1."},
				"limit": {"type": "integer", "minimum": 1, "description": "How many lines to read (default 2000)."}
			},
			"required": ["path"]
		}`),
		Target: pathTarget,
	},
	{
		Name:       "list_dir",
		Permission: "files.read",
		Description: "List a directory: its entries with their types and sizes, optionally recursively (skipping .git, node_modules " +
			"and other build and cache folders). Relative paths are relative to the workspace.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"path": {"type": "string", "description": "The directory (default: the workspace)."},
				"recursive": {"type": "boolean", "description": "List subdirectories too."},
				"max_entries": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Stop after this many entries (default 500)."}
			}
		}`),
		Target: pathTarget,
	},
	{
		Name:       "find_files",
		Permission: "files.read",
		Description: "Find files under a directory by path terms (`query`: words that must all appear in the path, any case), " +
			"by `glob` (`*.py`, `src/**/*.ts`) or by `type` (file or dir). Newest first. Skips .git, node_modules and build and cache folders.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"query": {"type": "string", "description": "Words that must all appear in the path, any case."},
				"glob": {"type": "string", "description": "A glob matched against the path below the directory (** crosses folders) or, without a slash, the name."},
				"type": {"type": "string", "enum": ["file", "dir"], "description": "Only files or only directories."},
				"path": {"type": "string", "description": "Where to search (default: the workspace)."},
				"limit": {"type": "integer", "minimum": 1, "maximum": 5000, "description": "At most this many results (default 200)."}
			}
		}`),
		Target: func(a map[string]any) string {
			for _, k := range []string{"query", "glob", "path"} {
				if v := oneLine(str(a, k)); v != "" {
					return v
				}
			}
			return ""
		},
	},
	{
		Name:       "grep",
		Permission: "files.read",
		Description: "Search file contents by regular expression (RE2 syntax, like Go and ripgrep) under a path, a file or a directory " +
			"(default: the workspace). `output_mode` is content (matching lines with their numbers, the default), files_with_matches or count.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"pattern": {"type": "string", "description": "The regular expression."},
				"path": {"type": "string", "description": "A file or a directory (default: the workspace)."},
				"glob": {"type": "string", "description": "Only files whose name or path matches this glob (*.go, src/**/*.ts)."},
				"case_insensitive": {"type": "boolean", "description": "Match any case."},
				"fixed_strings": {"type": "boolean", "description": "Take the pattern as plain text, not a regular expression."},
				"context": {"type": "integer", "minimum": 0, "maximum": 20, "description": "Lines of context around each match (content mode)."},
				"output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
				"head_limit": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "At most this many lines of output (default 500)."}
			},
			"required": ["pattern"]
		}`),
		Target: func(a map[string]any) string { return oneLine(str(a, "pattern")) },
	},
	{
		Name:       "write_file",
		Permission: "files.write",
		Description: "Write a whole file, creating it and its folders if needed. An existing file must have been read (read_file) " +
			"since it last changed, so nothing is overwritten unseen. Relative paths are relative to the workspace.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"path": {"type": "string", "description": "The file."},
				"content": {"type": "string", "description": "The whole new content."}
			},
			"required": ["path", "content"]
		}`),
		Target: pathTarget,
	},
	{
		Name:       "edit_file",
		Permission: "files.write",
		Description: "Replace text in a file: `old_text` (which must occur once, unless `replace_all`) becomes `new_text`. " +
			"Whitespace differences at line ends and in indentation are tolerated when the exact text is not found. Answers with a diff.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"path": {"type": "string", "description": "The file."},
				"old_text": {"type": "string", "description": "The text to replace, with enough context to be unique."},
				"new_text": {"type": "string", "description": "The text to put instead."},
				"replace_all": {"type": "boolean", "description": "Replace every occurrence."}
			},
			"required": ["path", "old_text", "new_text"]
		}`),
		Target: pathTarget,
	},
	{
		Name:       "apply_patch",
		Permission: "files.write",
		Description: "Apply a list of structured edits to files, all or nothing: `replace` changes `old_text` to `new_text` in an " +
			"existing file (as edit_file does), `add` creates a new file with `new_text`. With `dry_run` nothing is written and the " +
			"answer shows what would change.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"edits": {
					"type": "array",
					"minItems": 1,
					"items": {
						"type": "object",
						"properties": {
							"path": {"type": "string"},
							"action": {"type": "string", "enum": ["replace", "add"]},
							"old_text": {"type": "string"},
							"new_text": {"type": "string"},
							"replace_all": {"type": "boolean"}
						},
						"required": ["path", "action", "new_text"]
					}
				},
				"dry_run": {"type": "boolean", "description": "Show what would change without writing."}
			},
			"required": ["edits"]
		}`),
		Target: func(a map[string]any) string {
			edits, _ := a["edits"].([]any)
			var paths []string
			for _, e := range edits {
				if m, ok := e.(map[string]any); ok {
					if p := oneLine(str(m, "path")); p != "" && !containsStr(paths, p) {
						paths = append(paths, p)
					}
				}
			}
			switch len(paths) {
			case 0:
				return ""
			case 1:
				return paths[0]
			default:
				return fmt.Sprintf("%d files, first %s", len(paths), paths[0])
			}
		},
	},
	{
		Name:       "cron",
		Permission: "automations",
		Description: "Add, list and remove your own scheduled automations. When one fires, you get its `message` in the chat as " +
			"`[Automation \"name\" fired] message` and answer it there. A job runs `every_seconds` (60 or more), on a `cron_expr` " +
			"(5 fields, in `tz` when given) or once `at` a time (RFC 3339). Jobs do not fire while your computer is off; the host " +
			"wakes it for the next run, and a run missed while off is made once.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"action": {"type": "string", "enum": ["add", "list", "remove"]},
				"name": {"type": "string", "description": "The job's name (lowercase letters, digits and -), its id for remove."},
				"message": {"type": "string", "description": "What you are told when it fires (add)."},
				"every_seconds": {"type": "integer", "minimum": 60, "description": "Run every this many seconds."},
				"cron_expr": {"type": "string", "description": "A cron expression: minute hour day-of-month month day-of-week."},
				"tz": {"type": "string", "description": "IANA time zone of cron_expr, e.g. Europe/Rome (default UTC)."},
				"at": {"type": "string", "description": "Run once at this time, RFC 3339 (2026-12-01T09:00:00+01:00)."}
			},
			"required": ["action"]
		}`),
		Target: func(a map[string]any) string {
			act := oneLine(str(a, "action"))
			if name := oneLine(str(a, "name")); name != "" && act != "list" {
				return act + " " + name
			}
			return act
		},
	},
	addMCPServer,
	delegateTask,
	{
		Name:       ComputerScreenshotTool,
		Permission: "computer.screenshot",
		Description: "Take a screenshot of your whole desktop (the browsers you opened show on it) and look at it. " +
			"The image is shown to you in this turn only; take another when you need to see the screen again.",
		Parameters: schema(`{"type": "object", "properties": {}}`),
	},
	{
		Name:       "browser_identity_list",
		Permission: "browser.identity.list",
		Description: "List your browser identities: each is a browser profile of its own (cookies, storage, logins kept across " +
			"launches), open or available, with whether it has a proxy of its own, and the limits (how many may be open at once, how many may exist).",
		Parameters: schema(`{"type": "object", "properties": {}}`),
	},
	{
		Name:       "browser_identity_create",
		Permission: "browser.identity.create",
		Description: "Make a browser identity, closed: a new browser profile. Give it a `name`. Leave `proxy` out unless the person " +
			"gave you one for this identity: without it the browser uses your computer's own way out to the internet.",
		Parameters: schema(`{
			"type": "object",
			"properties": {
				"name": {"type": "string", "description": "A name for the identity (what it is for)."},
				"proxy": {"type": "string", "description": "Only when the person gave one: the proxy this identity's browser goes through, as they gave it."}
			},
			"required": ["name"]
		}`),
		Masked: []string{"proxy"},
		Target: func(a map[string]any) string { return oneLine(str(a, "name")) },
	},
	{
		Name:        "browser_identity_delete",
		Permission:  "browser.identity.delete",
		Description: "Delete a browser identity with its profile (cookies, storage, logins), closing its browser first.",
		Parameters:  identityIDSchema,
		Target:      identityTarget,
	},
	{
		Name:       "browser_identity_launch",
		Permission: "browser.identity.launch",
		Description: "Open the browser of an identity on your desktop, so the page tools (browser_navigate, browser_snapshot, ...) " +
			"can act on it with its `identity_id`. At most a few are open at once: opening one more closes the one used least recently.",
		Parameters: identityIDSchema,
		Target:     identityTarget,
	},
	{
		Name:        "browser_identity_close",
		Permission:  "browser.identity.close",
		Description: "Close the browser of an identity, keeping its profile for the next launch.",
		Parameters:  identityIDSchema,
		Target:      identityTarget,
	},
}

// ComputerScreenshotTool is the tool that shows the model its desktop.
const ComputerScreenshotTool = "computer_screenshot"

var identityIDSchema = schema(`{
	"type": "object",
	"properties": {"identity_id": {"type": "string", "description": "The identity's id, as browser_identity_list gives it."}},
	"required": ["identity_id"]
}`)

func identityTarget(a map[string]any) string { return oneLine(str(a, "identity_id")) }

// BrowserPageTools gives each page tool of the browser's MCP server
// (@playwright/mcp) the permission its calls exercise (ref 8.3). The model is
// offered the server's own tools, by their own names, each with an added
// identity_id; a tool of the server that is not here is not offered: that is
// browser_close (the manager's, through browser_identity_close),
// browser_install (the image carries its browser), browser_run_code_unsafe
// (arbitrary code in the server's own process, which would go round every
// permission below) and any tool a later version of the server adds, until it
// is given a permission here.
var BrowserPageTools = map[string]string{
	// Where the browser goes; a url is refused unless it is http or https.
	"browser_navigate":      "browser.navigate",
	"browser_navigate_back": "browser.navigate",
	"browser_tabs":          "browser.navigate",
	// What the page shows.
	"browser_snapshot":         "browser.read",
	"browser_take_screenshot":  "browser.read",
	"browser_console_messages": "browser.read",
	"browser_network_requests": "browser.read",
	"browser_network_request":  "browser.read",
	"browser_wait_for":         "browser.read",
	// What changes the page. browser_evaluate runs a script that can do
	// anything the page can, so it acts.
	"browser_click":         "browser.act",
	"browser_type":          "browser.act",
	"browser_fill_form":     "browser.act",
	"browser_select_option": "browser.act",
	"browser_press_key":     "browser.act",
	"browser_hover":         "browser.act",
	"browser_drag":          "browser.act",
	"browser_drop":          "browser.act",
	"browser_file_upload":   "browser.act",
	"browser_handle_dialog": "browser.act",
	"browser_resize":        "browser.act",
	"browser_evaluate":      "browser.act",
}

// BrowserIdentityArg is the argument added to every page tool: the open
// identity whose browser the call goes to.
const BrowserIdentityArg = "identity_id"

// IsBrowserIdentityTool reports a tool of the table that manages identities.
func IsBrowserIdentityTool(name string) bool { return strings.HasPrefix(name, "browser_identity_") }

// add_mcp_server is the model asking the host to add an MCP server to its own
// configuration (ref 7, 8.3). The tool does not change the config (the host
// owns it): it checks the entry by the config's own rules and reports the call
// as mcp.server.added, on which the host decides again and writes the server.
var addMCPServer = Spec{
	Name:       AddMCPServerTool,
	Permission: "mcp.servers.add",
	Description: "Ask to add an MCP server to your own configuration, once the program it needs is installed on your computer. " +
		"Give its `name` (lowercase letters, digits and -, starting with a letter or a digit; its tools are then offered to you as " +
		"mcp__<name>__<tool>) and either a `command` (run as the dot user in your home) with `args` and `env`, or a `url` " +
		"(streamable HTTP, or SSE for a URL ending in /sse) with `headers`. `secrets` names the environment variables or headers " +
		"whose values are secrets: never put a secret's value here; the person sets it. `reason` tells the person why you want it. " +
		"The host writes the server into your configuration; its tools then ask the person before each use until they allow them.",
	Parameters: schema(`{
		"type": "object",
		"properties": {
			"name": {"type": "string", "description": "The server's name: [a-z0-9-], 1 to 32, starting with a letter or a digit."},
			"command": {"type": "string", "description": "The program that runs the server (stdio)."},
			"args": {"type": "array", "items": {"type": "string"}, "description": "Its arguments."},
			"env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Environment variables that are not secrets, NAME: value."},
			"url": {"type": "string", "description": "The server's URL (streamable HTTP, or SSE for a URL ending in /sse)."},
			"headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "HTTP headers that are not secrets, Name: value."},
			"secrets": {"type": "array", "items": {"type": "string"}, "description": "Names of the environment variables (command) or headers (url) whose values are secrets the person sets."},
			"timeout_s": {"type": "integer", "minimum": 1, "maximum": 600, "description": "The longest one call may take, in seconds (default 120)."},
			"startup_timeout_s": {"type": "integer", "minimum": 1, "maximum": 600, "description": "The longest it may take to start, in seconds (default 60)."},
			"reason": {"type": "string", "description": "Why you want this server, for the person who decides."}
		},
		"required": ["name", "reason"]
	}`),
	Target: func(a map[string]any) string { return oneLine(str(a, "name")) },
}

// delegate_task is the Dot asking another Dot of its namespace to do a task
// (delegation with consent). The tool makes nothing: its tool.called carries
// the call's arguments, on which the host checks both Dots' consent and the
// bounds and makes the other Dot's Task; the answer comes back later as a
// system.event, which the chat is told.
var delegateTask = Spec{
	Name:       DelegateTaskTool,
	Permission: "dots.delegate",
	Description: "Ask another Dot to do a task for you: `dot` is its name (one of the Dots your configuration lets you ask), " +
		"`description` says what to do and what to answer, as you would write a task for a person; `priority` orders its " +
		"tasks (-100 to 100, higher first). The other Dot works with its own tools, permissions and memory. This call does " +
		"not wait: its answer, or why the request was refused, arrives later in your chat as a message starting with [Delegation].",
	Parameters: schema(`{
		"type": "object",
		"properties": {
			"dot": {"type": "string", "description": "The name of the Dot to ask."},
			"description": {"type": "string", "description": "What the other Dot should do and answer."},
			"priority": {"type": "integer", "minimum": -100, "maximum": 100, "description": "Priority among its tasks (default 0)."}
		},
		"required": ["dot", "description"]
	}`),
	Target:      func(a map[string]any) string { return oneLine(str(a, "dot")) },
	OfferedWhen: func(cfg protocol.RuntimeConfig) bool { return len(cfg.CanAsk()) > 0 },
}

// DelegateTaskTool is the name of the tool that asks another Dot for a task.
const DelegateTaskTool = "delegate_task"

// Offered says whether the model is offered the tool under cfg: its
// permission is not deny, and its own condition holds.
func (s Spec) Offered(cfg protocol.RuntimeConfig) bool {
	return cfg.Decision(s.Permission) != protocol.Deny && (s.OfferedWhen == nil || s.OfferedWhen(cfg))
}

// AddMCPServerTool is the name of the tool that asks for a new MCP server.
const AddMCPServerTool = "add_mcp_server"

// MCPToolPrefix starts the name of a declared MCP server's tool as the model
// sees it, mcp__<server>__<tool> (ref 7, nanobot's naming). A server's name
// holds no "_", so the server is read back from the name.
const MCPToolPrefix = "mcp__"

// MCPToolName is the model's name of a server's tool.
func MCPToolName(server, tool string) string { return MCPToolPrefix + server + "__" + tool }

// SplitMCPToolName reads the server and the server's own tool name back from
// a model's tool name; ok is false for a name that is not an MCP tool's.
func SplitMCPToolName(name string) (server, tool string, ok bool) {
	rest, ok := strings.CutPrefix(name, MCPToolPrefix)
	if !ok {
		return "", "", false
	}
	server, tool, ok = strings.Cut(rest, "__")
	if !ok || server == "" || tool == "" || strings.Contains(server, "_") {
		return "", "", false
	}
	return server, tool, true
}

// ToolPermission is the permission a call of the named tool exercises: the
// table's row, or mcp.<server> for a declared server's tool (one permission
// covers all of a server's tools, ref 7). ok is false for any other name,
// which is neither offered nor allowed.
func ToolPermission(name string) (string, bool) {
	if s, ok := Lookup(name); ok {
		return s.Permission, true
	}
	if p, ok := BrowserPageTools[name]; ok {
		return p, true
	}
	if server, _, ok := SplitMCPToolName(name); ok {
		return protocol.MCPPermissionPrefix + server, true
	}
	return "", false
}

// Lookup returns the table's row for name.
func Lookup(name string) (Spec, bool) {
	for _, s := range Table {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// ApprovalArguments returns what an approval.requested may carry of args.
func (s Spec) ApprovalArguments(args map[string]any) map[string]any {
	out := args
	if s.ApprovalArgs != nil {
		out = make(map[string]any, len(s.ApprovalArgs))
		for _, k := range s.ApprovalArgs {
			if v, ok := args[k]; ok {
				out[k] = v
			}
		}
	}
	if len(s.Masked) == 0 {
		return out
	}
	masked := make(map[string]any, len(out))
	for k, v := range out {
		masked[k] = v
		if containsStr(s.Masked, k) && v != nil {
			masked[k] = "***"
		}
	}
	return masked
}

// TargetOf returns the tool.called target of a call: the row's Target cut
// to one line of at most protocol.ToolTargetMax code points, or "" (absent).
func (s Spec) TargetOf(args map[string]any) string {
	if s.Target == nil {
		return ""
	}
	t := oneLine(s.Target(args))
	if utf8.RuneCountInString(t) > protocol.ToolTargetMax {
		r := []rune(t)
		t = string(r[:protocol.ToolTargetMax-1]) + "…"
	}
	return t
}

// Validate checks a call's arguments against the row's schema and returns
// them decoded, numbers given as text cast to numbers (ref 8.3: the registry
// validates a call before the gate sees it; an invalid call never reaches the
// gate and the model gets this error). Integers come back as int64.
func (s Spec) Validate(raw json.RawMessage) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the arguments of %s are not valid JSON: %v", s.Name, err)
	}
	var sch jsonSchema
	if err := json.Unmarshal(s.Parameters, &sch); err != nil {
		return nil, fmt.Errorf("the schema of %s does not parse: %w", s.Name, err)
	}
	out, err := sch.check("", v)
	if err != nil {
		return nil, fmt.Errorf("invalid arguments for %s: %w", s.Name, err)
	}
	m, _ := out.(map[string]any)
	return m, nil
}

// jsonSchema is the subset of JSON schema the table uses.
type jsonSchema struct {
	Type       string                `json:"type"`
	Properties map[string]jsonSchema `json:"properties"`
	Required   []string              `json:"required"`
	Items      *jsonSchema           `json:"items"`
	Enum       []string              `json:"enum"`
	Minimum    *float64              `json:"minimum"`
	Maximum    *float64              `json:"maximum"`
	MinItems   *int                  `json:"minItems"`
	// AdditionalProperties is the schema of the keys Properties does not
	// name (a map such as add_mcp_server's env); without it such a key is
	// refused.
	AdditionalProperties *jsonSchema `json:"additionalProperties"`
}

func (sch jsonSchema) check(at string, v any) (any, error) {
	name := at
	if name == "" {
		name = "the arguments"
	}
	switch sch.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s must be an object", name)
		}
		for _, r := range sch.Required {
			if _, ok := m[r]; !ok {
				return nil, fmt.Errorf("%s is required", join(at, r))
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make(map[string]any, len(m))
		for _, k := range keys {
			ps, known := sch.Properties[k]
			if !known && sch.AdditionalProperties != nil {
				ps, known = *sch.AdditionalProperties, true
			}
			if !known {
				return nil, fmt.Errorf("%s is not an argument of this tool", join(at, k))
			}
			if m[k] == nil && !containsStr(sch.Required, k) {
				// Models send null for an argument they leave out.
				continue
			}
			cv, err := ps.check(join(at, k), m[k])
			if err != nil {
				return nil, err
			}
			out[k] = cv
		}
		return out, nil
	case "array":
		a, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s must be an array", name)
		}
		if sch.MinItems != nil && len(a) < *sch.MinItems {
			return nil, fmt.Errorf("%s needs at least %d items", name, *sch.MinItems)
		}
		out := make([]any, len(a))
		for i, it := range a {
			if sch.Items == nil {
				out[i] = it
				continue
			}
			cv, err := sch.Items.check(fmt.Sprintf("%s[%d]", name, i), it)
			if err != nil {
				return nil, err
			}
			out[i] = cv
		}
		return out, nil
	case "string":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s must be a string", name)
		}
		if len(sch.Enum) > 0 && !containsStr(sch.Enum, s) {
			return nil, fmt.Errorf("%s must be one of %s", name, strings.Join(sch.Enum, ", "))
		}
		return s, nil
	case "boolean":
		switch b := v.(type) {
		case bool:
			return b, nil
		case string:
			if pb, err := strconv.ParseBool(b); err == nil {
				return pb, nil
			}
		}
		return nil, fmt.Errorf("%s must be true or false", name)
	case "integer", "number":
		var f float64
		switch n := v.(type) {
		case json.Number:
			x, err := n.Float64()
			if err != nil {
				return nil, fmt.Errorf("%s must be a number", name)
			}
			f = x
		case float64:
			f = n
		case string:
			x, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
			if err != nil {
				return nil, fmt.Errorf("%s must be a number", name)
			}
			f = x
		default:
			return nil, fmt.Errorf("%s must be a number", name)
		}
		if sch.Type == "integer" && f != math.Trunc(f) {
			return nil, fmt.Errorf("%s must be a whole number", name)
		}
		if sch.Minimum != nil && f < *sch.Minimum {
			return nil, fmt.Errorf("%s must be at least %v", name, *sch.Minimum)
		}
		if sch.Maximum != nil && f > *sch.Maximum {
			return nil, fmt.Errorf("%s must be at most %v", name, *sch.Maximum)
		}
		if sch.Type == "integer" {
			return int64(f), nil
		}
		return f, nil
	default:
		return v, nil
	}
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

func schema(s string) json.RawMessage {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		panic("tools: a schema of the table does not parse: " + err.Error())
	}
	b, _ := json.Marshal(v)
	return b
}

func pathTarget(a map[string]any) string { return oneLine(str(a, "path")) }

func str(a map[string]any, k string) string {
	s, _ := a[k].(string)
	return s
}

func boolArg(a map[string]any, k string) bool {
	b, _ := a[k].(bool)
	return b
}

func intArg(a map[string]any, k string, def int64) int64 {
	switch n := a[k].(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	return def
}

// firstLine is a command's first line, as it is (ref 5.4).
func firstLine(s string) string {
	s = strings.TrimLeft(s, "\r\n")
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// oneLine keeps a target on one line.
func oneLine(s string) string { return firstLine(s) }

func containsStr(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
