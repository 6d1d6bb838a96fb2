package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestToolPermission(t *testing.T) {
	tests := map[string]struct {
		reason string
		name   string
		want   string
		ok     bool
	}{
		"table":        {"a row of the table takes its own permission", "exec", "computer.exec", true},
		"add":          {"add_mcp_server is a row", "add_mcp_server", "mcp.servers.add", true},
		"mcp tool":     {"a server's tool takes its server's permission", "mcp__time__get_time", "mcp.time", true},
		"tool with __": {"the server ends at the first __; the tool may hold more", "mcp__time__a__b", "mcp.time", true},
		"no tool":      {"a server name alone is no tool", "mcp__time__", "", false},
		"underscore":   {"a server's name holds no _", "mcp__my_server__x", "", false},
		"page tool":    {"a page tool of the browser takes the table's browser permission", "browser_navigate", "browser.navigate", true},
		"unmapped":     {"a tool of the browser's server with no permission is neither offered nor allowed", "browser_run_code_unsafe", "", false},
		"unknown":      {"anything else is neither offered nor allowed", "browser_open", "", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ToolPermission(tc.name)
			if got != tc.want || ok != tc.ok {
				t.Errorf("%s\nToolPermission(%q) = %q, %v; want %q, %v", tc.reason, tc.name, got, ok, tc.want, tc.ok)
			}
		})
	}
	if got := MCPToolName("time", "get_time"); got != "mcp__time__get_time" {
		t.Errorf("MCPToolName = %q", got)
	}
}

func TestAddMCPServer(t *testing.T) {
	r := NewRunner(Env{DeclaredMCPServers: func() []string { return []string{"taken"} }})
	tests := map[string]struct {
		reason   string
		args     string
		wantOK   bool
		wantText string
	}{
		"command": {"a valid command entry is reported to the host", `{"name":"time","command":"uvx","args":["mcp-server-time"],"env":{"LOG_LEVEL":"warning"},"secrets":["TIME_KEY"],"reason":"to tell the time"}`, true, `Asked the host to add the MCP server "time"`},
		"url":     {"a valid url entry too", `{"name":"search","url":"https://search.example/mcp","headers":{"X-Client":"dots"},"secrets":["Authorization"],"reason":"search"}`, true, "Asked the host"},
		"both":    {"the config's own rules apply", `{"name":"x","command":"a","url":"https://b","reason":"r"}`, false, "exactly one of command or url"},
		"name":    {"a name the config refuses", `{"name":"My_Server","command":"a","reason":"r"}`, false, "must be 1 to 32"},
		"taken":   {"only the person changes a declared server", `{"name":"taken","command":"a","reason":"r"}`, false, "already declares an MCP server named \"taken\""},
		"secret":  {"a secret named as a value the entry writes", `{"name":"x","command":"a","env":{"K":"v"},"secrets":["K"],"reason":"r"}`, false, "which env also writes"},
		"env int": {"env values are strings", `{"name":"x","command":"a","env":{"K":1},"reason":"r"}`, false, "must be a string"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := r.Run(context.Background(), "add_mcp_server", json.RawMessage(tc.args))
			if res.OK != tc.wantOK || !strings.Contains(res.Text, tc.wantText) {
				t.Fatalf("%s\nadd_mcp_server %s = %+v; want ok %v and %q", tc.reason, tc.args, res, tc.wantOK, tc.wantText)
			}
			if !tc.wantOK {
				if len(res.Events) != 0 {
					t.Errorf("a refused call reports events: %+v", res.Events)
				}
				return
			}
			if len(res.Events) != 1 || res.Events[0].Type != protocol.EventMCPServerAdded {
				t.Fatalf("events = %+v; want one mcp.server.added", res.Events)
			}
			added, _ := res.Events[0].Data.(protocol.MCPServerAdded)
			var got, want any
			_ = json.Unmarshal(added.Arguments, &got)
			_ = json.Unmarshal([]byte(tc.args), &want)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("mcp.server.added arguments are not the call's (-want +got):\n%s", d)
			}
		})
	}
	if got := addMCPServer.TargetOf(map[string]any{"name": "time"}); got != "time" {
		t.Errorf("target = %q, want the server's name", got)
	}
}
