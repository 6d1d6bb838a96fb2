package tools

import (
	"slices"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// TestToolsOf: every permission of the table covers at least one tool, and
// every tool is covered by the permission it exercises.
func TestToolsOf(t *testing.T) {
	for _, p := range protocol.Permissions {
		if len(ToolsOf(p.Name)) == 0 {
			t.Errorf("permission %s covers no tool", p.Name)
		}
	}
	for _, s := range Table {
		if !slices.Contains(ToolsOf(s.Permission), s.Name) {
			t.Errorf("%s is not among the tools of %s: %v", s.Name, s.Permission, ToolsOf(s.Permission))
		}
	}
	for name, p := range BrowserPageTools {
		if !slices.Contains(ToolsOf(p), name) {
			t.Errorf("%s is not among the tools of %s", name, p)
		}
	}
	if got := ToolsOf("mcp.time"); got != nil {
		t.Errorf("ToolsOf(mcp.time) = %v; a server's tools are its own to list", got)
	}
}
