package tools

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestTableRows(t *testing.T) {
	want := []string{"exec", "exec_session", "list_exec_sessions", "read_file", "list_dir", "find_files", "grep", "write_file", "edit_file", "apply_patch", "cron", "add_mcp_server",
		"delegate_task", "computer_screenshot", "browser_identity_list", "browser_identity_create", "browser_identity_delete", "browser_identity_launch", "browser_identity_close"}
	var got []string
	for _, s := range Table {
		got = append(got, s.Name)
		if _, known := protocol.LookupPermission(s.Permission); !known {
			t.Errorf("%s takes permission %q, which the host's config does not know", s.Name, s.Permission)
		}
		var sch map[string]any
		if err := json.Unmarshal(s.Parameters, &sch); err != nil || sch["type"] != "object" {
			t.Errorf("%s: parameters are not an object schema: %s", s.Name, s.Parameters)
		}
		if s.Description == "" || (s.Target == nil && !strings.HasSuffix(s.Name, "_list") && s.Name != ComputerScreenshotTool) {
			t.Errorf("%s has no description or no target function", s.Name)
		}
		if s.ApprovalArgs != nil {
			t.Errorf("%s hides arguments from its approval; ref 8.8 shows all of them for this tool", s.Name)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("table rows (-want +got):\n%s", d)
	}
	wantPerm := map[string]string{
		"exec": "computer.exec", "exec_session": "computer.exec", "list_exec_sessions": "computer.exec",
		"read_file": "files.read", "list_dir": "files.read", "find_files": "files.read", "grep": "files.read",
		"write_file": "files.write", "edit_file": "files.write", "apply_patch": "files.write", "cron": "automations",
		"add_mcp_server": "mcp.servers.add", "delegate_task": "dots.delegate", "computer_screenshot": "computer.screenshot",
		"browser_identity_list": "browser.identity.list", "browser_identity_create": "browser.identity.create",
		"browser_identity_delete": "browser.identity.delete", "browser_identity_launch": "browser.identity.launch",
		"browser_identity_close": "browser.identity.close",
	}
	for name, perm := range wantPerm {
		s, ok := Lookup(name)
		if !ok || s.Permission != perm {
			t.Errorf("Lookup(%s) = %+v, %v; want permission %s", name, s.Permission, ok, perm)
		}
	}
	// The page tools and the servers' tools are not rows; their permission
	// still comes from this table.
	for _, name := range []string{"browser_navigate", "mcp__x__y"} {
		if _, ok := Lookup(name); ok {
			t.Errorf("Lookup(%s) found a row; it is a server's tool", name)
		}
	}
	for name, want := range map[string]string{"browser_navigate": "browser.navigate", "browser_snapshot": "browser.read",
		"browser_type": "browser.act", "mcp__x__y": "mcp.x"} {
		if got, ok := ToolPermission(name); !ok || got != want {
			t.Errorf("ToolPermission(%s) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"browser_close", "browser_install", "browser_run_code_unsafe"} {
		if p, ok := ToolPermission(name); ok {
			t.Errorf("ToolPermission(%s) = %q; the model is never offered it", name, p)
		}
	}
	for name, perm := range BrowserPageTools {
		if _, known := protocol.LookupPermission(perm); !known || !strings.HasPrefix(perm, "browser.") {
			t.Errorf("page tool %s takes permission %q, not a browser permission of the table", name, perm)
		}
	}
}

func TestApprovalMasksTheProxy(t *testing.T) {
	s, _ := Lookup("browser_identity_create")
	args := map[string]any{"name": "shop", "proxy": "socks5://user:pw@example.net:1080"}
	got := s.ApprovalArguments(args)
	if d := cmp.Diff(map[string]any{"name": "shop", "proxy": "***"}, got); d != "" {
		t.Errorf("approval arguments (-want +got):\n%s", d)
	}
	if args["proxy"] != "socks5://user:pw@example.net:1080" {
		t.Errorf("the call's own arguments were changed: %v", args)
	}
	if got := s.ApprovalArguments(map[string]any{"name": "plain"}); len(got) != 1 {
		t.Errorf("without a proxy the approval shows %v", got)
	}
}

func TestTargets(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"exec", map[string]any{"command": "make test\necho done"}, "make test"},
		{"exec", map[string]any{"command": "  ls -la  "}, "ls -la"},
		{"exec", map[string]any{"command": long}, strings.Repeat("x", protocol.ToolTargetMax-1) + "…"},
		{"exec_session", map[string]any{"session_id": "s1", "input": "secret\n"}, "input to s1"},
		{"exec_session", map[string]any{"session_id": "s1", "close_stdin": true}, "input to s1"},
		{"exec_session", map[string]any{"session_id": "s1", "terminate": true}, "terminate s1"},
		{"exec_session", map[string]any{"session_id": "s1"}, "output of s1"},
		{"list_exec_sessions", map[string]any{}, ""},
		{"read_file", map[string]any{"path": "notes/a.md"}, "notes/a.md"},
		{"list_dir", map[string]any{}, ""},
		{"write_file", map[string]any{"path": "/home/dot/memory/MEMORY.md", "content": "private"}, "/home/dot/memory/MEMORY.md"},
		{"edit_file", map[string]any{"path": "a.go", "old_text": "x", "new_text": "y"}, "a.go"},
		{"find_files", map[string]any{"query": "invoice", "glob": "*.pdf", "path": "docs"}, "invoice"},
		{"find_files", map[string]any{"glob": "*.pdf", "path": "docs"}, "*.pdf"},
		{"find_files", map[string]any{"path": "docs"}, "docs"},
		{"grep", map[string]any{"pattern": "TODO", "path": "src"}, "TODO"},
		{"apply_patch", map[string]any{"edits": []any{map[string]any{"path": "a.txt"}, map[string]any{"path": "a.txt"}}}, "a.txt"},
		{"apply_patch", map[string]any{"edits": []any{map[string]any{"path": "a.txt"}, map[string]any{"path": "b.txt"}, map[string]any{"path": "c.txt"}}}, "3 files, first a.txt"},
		{"cron", map[string]any{"action": "add", "name": "daily-standup", "message": "m"}, "add daily-standup"},
		{"cron", map[string]any{"action": "remove", "name": "daily-standup"}, "remove daily-standup"},
		{"cron", map[string]any{"action": "list"}, "list"},
	}
	for _, tc := range tests {
		s, _ := Lookup(tc.tool)
		got := s.TargetOf(tc.args)
		if got != tc.want {
			t.Errorf("%s target of %v = %q, want %q", tc.tool, tc.args, got, tc.want)
		}
		if got != "" {
			if err := protocol.CheckToolTarget(got); err != nil {
				t.Errorf("%s target %q breaks the host's rule: %v", tc.tool, got, err)
			}
		}
	}
}

// TestStartsTerminal: exec with tty is the one call that starts a terminal
// session (ref 5.4 tool.called tty); every other row says it never does.
func TestStartsTerminal(t *testing.T) {
	tests := map[string]struct {
		tool string
		args map[string]any
		want bool
	}{
		"exec with tty":    {"exec", map[string]any{"command": "python3", "tty": true}, true},
		"exec without tty": {"exec", map[string]any{"command": "python3"}, false},
		"exec tty false":   {"exec", map[string]any{"command": "python3", "tty": false}, false},
		"exec_session":     {"exec_session", map[string]any{"session_id": "s1", "input": "1+1\n"}, false},
	}
	for name, tc := range tests {
		s, _ := Lookup(tc.tool)
		got := s.StartsTerminal != nil && s.StartsTerminal(tc.args)
		if got != tc.want {
			t.Errorf("%s: %s starts a terminal for %v = %v, want %v", name, tc.tool, tc.args, got, tc.want)
		}
	}
	for _, s := range Table {
		if s.StartsTerminal != nil && s.Name != "exec" {
			t.Errorf("%s says it can start a terminal; only exec does", s.Name)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		tool    string
		args    string
		want    map[string]any
		wantErr string
	}{
		{"exec", `{"command":"ls","timeout":"30","tty":"true"}`, map[string]any{"command": "ls", "timeout": int64(30), "tty": true}, ""},
		{"exec", `{"command":"ls","yield_time_ms":null}`, map[string]any{"command": "ls"}, ""},
		{"exec", `{}`, nil, "invalid arguments for exec: command is required"},
		{"exec", `{"command":"ls","timeout":601}`, nil, "invalid arguments for exec: timeout must be at most 600"},
		{"exec", `{"command":"ls","timeout":1.5}`, nil, "invalid arguments for exec: timeout must be a whole number"},
		{"exec", `{"command":"ls","shell":"zsh"}`, nil, "invalid arguments for exec: shell is not an argument of this tool"},
		{"exec", `{"command":7}`, nil, "invalid arguments for exec: command must be a string"},
		{"exec", `not json`, nil, "the arguments of exec are not valid JSON"},
		{"list_exec_sessions", ``, map[string]any{}, ""},
		{"cron", `{"action":"pause"}`, nil, "invalid arguments for cron: action must be one of add, list, remove"},
		{"apply_patch", `{"edits":[]}`, nil, "invalid arguments for apply_patch: edits needs at least 1 items"},
		{"apply_patch", `{"edits":[{"path":"a","action":"add"}]}`, nil, "invalid arguments for apply_patch: edits[0].new_text is required"},
		{"apply_patch", `{"edits":[{"path":"a","action":"add","new_text":"x"}],"dry_run":true}`,
			map[string]any{"edits": []any{map[string]any{"path": "a", "action": "add", "new_text": "x"}}, "dry_run": true}, ""},
	}
	for _, tc := range tests {
		s, _ := Lookup(tc.tool)
		got, err := s.Validate(json.RawMessage(tc.args))
		if tc.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("%s.Validate(%s) error = %v, want %q", tc.tool, tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s.Validate(%s): %v", tc.tool, tc.args, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s.Validate(%s) (-want +got):\n%s", tc.tool, tc.args, d)
		}
	}
}

func TestRunRefusesUnknownToolsAndBadArguments(t *testing.T) {
	r := NewRunner(Env{RelayPath: "/nonexistent/dot-agentd"})
	res := r.Run(t.Context(), "browser_navigate", json.RawMessage(`{"url":"https://example.com"}`))
	if res.OK || res.Text != `There is no tool named "browser_navigate".` {
		t.Errorf("unknown tool: %+v", res)
	}
	res = r.Run(t.Context(), "read_file", json.RawMessage(`{"offset":2}`))
	if res.OK || res.Text != "invalid arguments for read_file: path is required." {
		t.Errorf("bad arguments: %+v", res)
	}
}

func TestApprovalArguments(t *testing.T) {
	s := Spec{ApprovalArgs: []string{"name"}}
	got := s.ApprovalArguments(map[string]any{"name": "work", "proxy": "http://u:p@h"})
	if d := cmp.Diff(map[string]any{"name": "work"}, got); d != "" {
		t.Errorf("approval arguments (-want +got):\n%s", d)
	}
	all, _ := Lookup("exec")
	args := map[string]any{"command": "ls", "cwd": "/tmp"}
	if d := cmp.Diff(args, all.ApprovalArguments(args)); d != "" {
		t.Errorf("exec approval arguments (-want +got):\n%s", d)
	}
}

// TestOffered: a tool is offered when its permission is not deny and its own
// condition holds. Ref 5.3 offers a tool that creates or deletes a browser
// identity only when the Dot manages its identities; ref 6 and 7 say a Dot
// always does ("the Dot manages its identities itself", it has no browser
// settings, and a config naming one is refused), so here that condition
// always holds and the identity tools follow their permission alone.
func TestOffered(t *testing.T) {
	config := func(perm string, d protocol.Decision, canAsk ...string) protocol.RuntimeConfig {
		cfg := protocol.RuntimeConfig{Permissions: map[string]protocol.Decision{perm: d}}
		if len(canAsk) > 0 {
			cfg.Delegation = &protocol.DelegationConfig{CanAsk: canAsk}
		}
		return cfg
	}
	tests := map[string]struct {
		reason string
		tool   string
		cfg    protocol.RuntimeConfig
		want   bool
	}{
		"create allowed":   {"an allowed create is offered", "browser_identity_create", config("browser.identity.create", protocol.Allow), true},
		"create asks":      {"a create that asks is offered, and the call asks", "browser_identity_create", config("browser.identity.create", protocol.Ask), true},
		"create denied":    {"a denied create is not offered", "browser_identity_create", config("browser.identity.create", protocol.Deny), false},
		"create unnamed":   {"a permission the config does not name is denied", "browser_identity_create", config("files.read", protocol.Allow), false},
		"delete asks":      {"delete asks by default and is offered", "browser_identity_delete", config("browser.identity.delete", protocol.Ask), true},
		"delete denied":    {"a denied delete is not offered", "browser_identity_delete", config("browser.identity.delete", protocol.Deny), false},
		"delegate no dots": {"delegate_task needs a Dot it may ask", "delegate_task", config("dots.delegate", protocol.Allow), false},
		"delegate a dot":   {"delegate_task with a Dot it may ask", "delegate_task", config("dots.delegate", protocol.Allow, "helper"), true},
	}
	for name, tc := range tests {
		s, ok := Lookup(tc.tool)
		if !ok {
			t.Fatalf("%s: no row %s", name, tc.tool)
		}
		if got := s.Offered(tc.cfg); got != tc.want {
			t.Errorf("%s: %s offered under %v = %v, want %v", tc.reason, tc.tool, tc.cfg.Permissions, got, tc.want)
		}
	}
}
