package eventtext

import (
	"encoding/json"
	"strings"

	"github.com/invisible-dots/invisible-dots/guest/engine/tools"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// PermissionPhrase is a permission in words with its risk, as every
// approval card says it (ref 9.7; the web client's permissionPhrase reads
// the same table): "Run commands (high risk)".
func PermissionPhrase(permission string) string {
	if info, ok := protocol.LookupPermission(permission); ok {
		return info.Label + " (" + string(info.Risk) + " risk)"
	}
	if server, ok := protocol.MCPServerOfPermission(permission); ok {
		return "the MCP server " + server + " (high risk)"
	}
	switch permission {
	case protocol.BudgetPermission:
		return "Spend more on this task"
	case protocol.SpendPermission:
		return "Spend more today in this namespace"
	}
	return permission
}

// RiskLine is the approval card's risk as one line for the command line and
// the channels: the permission in words, "destructive" when the call is
// (protocol.DestructiveCall), and what an "always" of it would allow.
func RiskLine(permission, tool string, args json.RawMessage) string {
	line := PermissionPhrase(permission)
	if protocol.OneTimePermission(permission) {
		return line + "; answers this question only"
	}
	if protocol.DestructiveCall(permission, tool, args) {
		line += ", destructive"
	}
	return line + "; always would allow " + AlwaysCovers(permission)
}

// AlwaysCovers names the tools an "Always allow" of permission covers (the
// engine's tool table).
func AlwaysCovers(permission string) string {
	if server, ok := protocol.MCPServerOfPermission(permission); ok {
		return "every tool of the MCP server " + server
	}
	if t := tools.ToolsOf(permission); len(t) > 0 {
		return strings.Join(t, ", ")
	}
	return "everything " + permission + " covers"
}
