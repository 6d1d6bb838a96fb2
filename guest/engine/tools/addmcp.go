package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// addMCPServerCall checks the entry the model asks for by the config's own
// rules and reports the call as mcp.server.added, committed with its result.
// It writes nothing: the config is the host's, which decides again (ref 5.4)
// and pushes the config with the server, whose tools then come up.
func (r *Runner) addMCPServerCall(_ context.Context, a map[string]any) Result {
	name := str(a, "name")
	if err := protocol.ValidateMCPServer(name, mcpEntry(a)); err != nil {
		return fail(fmt.Sprintf("The server was not asked for: %v.", err))
	}
	if r.env.DeclaredMCPServers != nil && slices.Contains(r.env.DeclaredMCPServers(), name) {
		return fail(fmt.Sprintf("Your configuration already declares an MCP server named %q; only the person changes or removes a server. Choose another name.", name))
	}
	// The event carries the call's arguments as the model made them (ref 5.4),
	// which the host compares with the approval the person gave.
	raw, err := json.Marshal(a)
	if err != nil {
		return fail(fmt.Sprintf("The arguments could not be encoded: %v.", err))
	}
	res := ok(fmt.Sprintf("Asked the host to add the MCP server %q to your configuration. When the host writes it, the server "+
		"is started and its tools are offered to you as %s<tool>; each use asks the person until they allow the server. "+
		"Secrets it names are set by the person.", name, MCPToolName(name, "")))
	res.Events = []Event{{Type: protocol.EventMCPServerAdded, Data: protocol.MCPServerAdded{Arguments: raw}}}
	return res
}

// mcpEntry reads the server entry out of add_mcp_server's arguments, which
// the table's schema has already checked for shape.
func mcpEntry(a map[string]any) protocol.MCPServerConfig {
	return protocol.MCPServerConfig{
		Command:         str(a, "command"),
		URL:             str(a, "url"),
		TimeoutS:        int(intArg(a, "timeout_s", 0)),
		StartupTimeoutS: int(intArg(a, "startup_timeout_s", 0)),
		Args:            strList(a, "args"),
		Secrets:         strList(a, "secrets"),
		Env:             strMap(a, "env"),
		Headers:         strMap(a, "headers"),
	}
}

func strList(a map[string]any, k string) []string {
	l, _ := a[k].([]any)
	out := make([]string, 0, len(l))
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func strMap(a map[string]any, k string) map[string]string {
	m, _ := a[k].(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for key, v := range m {
		if s, ok := v.(string); ok {
			out[key] = s
		}
	}
	return out
}
