package protocol

import (
	"encoding/json"
	"path"
	"slices"
	"strings"
)

// DefaultWorkspace is where the engine's relative paths and commands start
// when INVISIBLE_DOTS_WORKSPACE says nothing (the engine's Workspace).
const DefaultWorkspace = DefaultDotHome + "/workspace"

// DestructivePermissions are the permissions every call of which an
// approval card marks destructive (ref 9.7): a command, the deletion of a
// browser identity. A file write is destructive only where it leaves the
// workspace (WritesOutside). A destructive card is never allowed by a
// single key: the web client asks for the button.
var DestructivePermissions = []string{"computer.exec", "browser.identity.delete"}

// DestructiveCall says whether an approval of tool (exercising permission)
// with args is destructive: the permission's every call is, or the call
// writes a file outside the workspace.
func DestructiveCall(permission, tool string, args json.RawMessage) bool {
	return slices.Contains(DestructivePermissions, permission) || WritesOutside(tool, args, DefaultWorkspace)
}

// WritesOutside says whether a call of one of the file tools that write
// (write_file, edit_file, apply_patch) names a path outside workspace. A
// relative path starts at the workspace, "~" at the Dot's home; ".." is
// followed. Arguments that do not read are not judged destructive here:
// the tool refuses them.
func WritesOutside(tool string, args json.RawMessage, workspace string) bool {
	for _, p := range writePaths(tool, args) {
		if !within(resolveToolPath(p, workspace), workspace) {
			return true
		}
	}
	return false
}

// writePaths are the paths a file-writing call names.
func writePaths(tool string, args json.RawMessage) []string {
	switch tool {
	case "write_file", "edit_file":
		var a struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(args, &a) != nil || a.Path == "" {
			return nil
		}
		return []string{a.Path}
	case "apply_patch":
		var a struct {
			Edits []struct {
				Path string `json:"path"`
			} `json:"edits"`
		}
		if json.Unmarshal(args, &a) != nil {
			return nil
		}
		var out []string
		for _, e := range a.Edits {
			if e.Path != "" {
				out = append(out, e.Path)
			}
		}
		return out
	}
	return nil
}

// resolveToolPath is the absolute path a file tool's argument names.
func resolveToolPath(p, workspace string) string {
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		return path.Join(DefaultDotHome, strings.TrimPrefix(p, "~"))
	case path.IsAbs(p):
		return path.Clean(p)
	}
	return path.Join(workspace, p)
}

func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
