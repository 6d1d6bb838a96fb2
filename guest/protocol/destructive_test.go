package protocol

import "testing"

// TestDestructiveCall: a command and the deletion of an identity are always
// destructive; a file write is when any path it names leaves the workspace.
func TestDestructiveCall(t *testing.T) {
	for _, c := range []struct {
		permission, tool, args string
		want                   bool
	}{
		{"computer.exec", "exec", `{"command":"ls"}`, true},
		{"browser.identity.delete", "browser_identity_delete", `{"identity_id":"x"}`, true},
		{"files.write", "write_file", `{"path":"notes.md","content":"x"}`, false},
		{"files.write", "write_file", `{"path":"/home/dot/workspace/a/b.md"}`, false},
		{"files.write", "write_file", `{"path":"/home/dot/.bashrc"}`, true},
		{"files.write", "write_file", `{"path":"~/.ssh/authorized_keys"}`, true},
		{"files.write", "write_file", `{"path":"~/workspace/x"}`, false},
		{"files.write", "edit_file", `{"path":"../.profile","old_text":"a","new_text":"b"}`, true},
		{"files.write", "edit_file", `{"path":"/home/dot/workspacex/y"}`, true},
		{"files.write", "apply_patch", `{"edits":[{"path":"a.md"},{"path":"b.md"}]}`, false},
		{"files.write", "apply_patch", `{"edits":[{"path":"a.md"},{"path":"/etc/hosts"}]}`, true},
		{"files.read", "read_file", `{"path":"/etc/hosts"}`, false},
		{"browser.act", "browser_click", `{}`, false},
	} {
		if got := DestructiveCall(c.permission, c.tool, []byte(c.args)); got != c.want {
			t.Errorf("DestructiveCall(%s, %s, %s) = %v, want %v", c.permission, c.tool, c.args, got, c.want)
		}
	}
}
