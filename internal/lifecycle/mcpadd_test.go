package lifecycle

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
)

func TestDecideMCPAddition(t *testing.T) {
	const args = `{"name":"time","command":"uvx","args":["mcp-server-time"],"secrets":["TIME_KEY"],"reason":"to tell the time"}`
	// The same call as the approval showed it, keys in another order.
	const reordered = `{"reason":"to tell the time","secrets":["TIME_KEY"],"command":"uvx","name":"time","args":["mcp-server-time"]}`
	entry := protocol.MCPServerConfig{Command: "uvx", Args: []string{"mcp-server-time"}, Secrets: []string{"TIME_KEY"}}
	approved := map[string]json.RawMessage{"req-1": json.RawMessage(reordered)}
	tests := map[string]struct {
		reason string
		args   string
		facts  MCPAdditionFacts
		want   MCPAdditionDecision
	}{
		"approved": {
			reason: "a person approved a call of exactly these arguments: it is written and uses the approval",
			args:   args, facts: MCPAdditionFacts{Approved: approved},
			want: MCPAdditionDecision{Name: "time", Entry: entry, Write: true, ApprovalID: "req-1"},
		},
		"allowed": {
			reason: "the config allows mcp.servers.add: no approval is needed or used",
			args:   args, facts: MCPAdditionFacts{Allowed: true, Approved: approved},
			want: MCPAdditionDecision{Name: "time", Entry: entry, Write: true},
		},
		"used": {
			reason: "one approval adds one server once",
			args:   args, facts: MCPAdditionFacts{Approved: approved, Used: map[string]bool{"req-1": true}},
			want: MCPAdditionDecision{Name: "time", Entry: entry, Refused: "mcp.servers.add is not allowed and no unused approval of these exact arguments was given"},
		},
		"other arguments": {
			reason: "an approval of other arguments does not cover this call",
			args:   `{"name":"time","command":"uvx","args":["other"],"reason":"to tell the time"}`, facts: MCPAdditionFacts{Approved: approved},
			want: MCPAdditionDecision{Name: "time", Entry: protocol.MCPServerConfig{Command: "uvx", Args: []string{"other"}},
				Refused: "mcp.servers.add is not allowed and no unused approval of these exact arguments was given"},
		},
		"taken": {
			reason: "only the person changes a declared server",
			args:   args, facts: MCPAdditionFacts{Allowed: true, Declared: map[string]protocol.MCPServerConfig{"time": {Command: "other"}}},
			want: MCPAdditionDecision{Name: "time", Entry: entry, Refused: `the Dot already declares an MCP server named "time"; only the person changes or removes a server`},
		},
		"already written": {
			reason: "the spec holds this very entry (the log line was lost after the write): only the log line is owed",
			args:   args, facts: MCPAdditionFacts{Approved: approved, Declared: map[string]protocol.MCPServerConfig{"time": entry}},
			want: MCPAdditionDecision{Name: "time", Entry: entry, Already: true, ApprovalID: "req-1"},
		},
		"invalid": {
			reason: "an entry the config's rules refuse is not written",
			args:   `{"name":"t","command":"a","url":"https://b","reason":"r"}`, facts: MCPAdditionFacts{Allowed: true},
			want: MCPAdditionDecision{Name: "t", Entry: protocol.MCPServerConfig{Command: "a", URL: "https://b"}, Refused: "mcp_servers.t needs exactly one of command or url"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := DecideMCPAddition(projection.MCPAddition{EventID: 7, Arguments: json.RawMessage(tc.args)}, tc.facts)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s\nDecideMCPAddition(%s) (-want +got):\n%s", tc.reason, tc.args, d)
			}
		})
	}
}
