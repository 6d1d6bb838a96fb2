package tools

import "slices"

// ToolsOf lists, sorted, the tools whose calls exercise permission: the
// table's rows and the browser's page tools. It is what an
// "Always allow" of that permission covers, named on every approval card
// (the web client's, the command line's, the channels'; ref 9.7). An
// mcp.<server> permission covers every tool of that server, which only its
// running server can list: nil here.
func ToolsOf(permission string) []string {
	var out []string
	for _, s := range Table {
		if s.Permission == permission {
			out = append(out, s.Name)
		}
	}
	for name, p := range BrowserPageTools {
		if p == permission {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
