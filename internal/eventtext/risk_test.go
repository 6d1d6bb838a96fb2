package eventtext

import "testing"

func TestRiskLine(t *testing.T) {
	for _, c := range []struct{ permission, tool, args, want string }{
		{"files.write", "write_file", `{"path":"notes.md"}`, "Write files (medium risk); always would allow apply_patch, edit_file, write_file"},
		{"files.write", "write_file", `{"path":"/etc/hosts"}`, "Write files (medium risk), destructive; always would allow apply_patch, edit_file, write_file"},
		{"mcp.time", "mcp__time__now", `{}`, "the MCP server time (high risk); always would allow every tool of the MCP server time"},
	} {
		if got := RiskLine(c.permission, c.tool, []byte(c.args)); got != c.want {
			t.Errorf("RiskLine(%s, %s) = %q, want %q", c.permission, c.args, got, c.want)
		}
	}
	if got := RiskLine("computer.exec", "exec", []byte(`{"command":"ls"}`)); got[:32] != "Run commands (high risk), destru" {
		t.Errorf("RiskLine(computer.exec) = %q", got)
	}
}
