package lifecycle

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
)

// MCPAdditionFacts is what the decision reads of the Dot.
type MCPAdditionFacts struct {
	// Declared is the Dot's spec's servers by name, each as a runtime entry.
	Declared map[string]protocol.MCPServerConfig
	// Allowed: the Dot's config allows mcp.servers.add (resolved, default
	// ask).
	Allowed bool
	// Approved are the approvals a person approved of add_mcp_server calls,
	// by the guest's request id, with the arguments the person read.
	Approved map[string]json.RawMessage
	// Used are the approvals an earlier addition used up.
	Used map[string]bool
}

// MCPAdditionDecision is what to do with one addition.
type MCPAdditionDecision struct {
	Name  string
	Entry protocol.MCPServerConfig
	// Write: write Entry under Name into the Dot's spec. Already: the spec
	// holds that very entry (a write whose log line was lost), so only the
	// log line is owed.
	Write, Already bool
	// ApprovalID is the approval the write uses up; "" when the config
	// allows the permission.
	ApprovalID string
	// Refused says why it is not written, in words for the log.
	Refused string
}

// addArgs are add_mcp_server's arguments (guest/engine/tools).
type addArgs struct {
	Name            string            `json:"name"`
	Command         string            `json:"command"`
	Args            []string          `json:"args"`
	Env             map[string]string `json:"env"`
	URL             string            `json:"url"`
	Headers         map[string]string `json:"headers"`
	Secrets         []string          `json:"secrets"`
	TimeoutS        int               `json:"timeout_s"`
	StartupTimeoutS int               `json:"startup_timeout_s"`
	Reason          string            `json:"reason"`
}

// DecideMCPAddition decides one mcp.server.added (ref 5.4): the server is
// written only when its entry passes the config's own rules under a name not
// yet declared, and the Dot's config allows mcp.servers.add or the person
// approved a call of exactly these arguments (equal as JSON values, keys in
// any order) that no earlier addition used. The guest checked all this too;
// the host decides again because the config is its own and a guest is not
// trusted with it.
func DecideMCPAddition(a projection.MCPAddition, f MCPAdditionFacts) MCPAdditionDecision {
	var args addArgs
	if err := json.Unmarshal(a.Arguments, &args); err != nil {
		return MCPAdditionDecision{Refused: fmt.Sprintf("its arguments do not read: %v", err)}
	}
	d := MCPAdditionDecision{Name: args.Name, Entry: protocol.MCPServerConfig{
		Command: args.Command, Args: args.Args, Env: args.Env, URL: args.URL, Headers: args.Headers,
		Secrets: args.Secrets, TimeoutS: args.TimeoutS, StartupTimeoutS: args.StartupTimeoutS,
	}}
	if err := protocol.ValidateMCPServer(args.Name, d.Entry); err != nil {
		d.Refused = err.Error()
		return d
	}
	approval := ""
	if !f.Allowed {
		for id, shown := range f.Approved {
			if !f.Used[id] && sameJSON(shown, a.Arguments) {
				approval = id
				break
			}
		}
		if approval == "" {
			d.Refused = "mcp.servers.add is not allowed and no unused approval of these exact arguments was given"
			return d
		}
	}
	if have, ok := f.Declared[args.Name]; ok {
		if reflect.DeepEqual(normalize(have), normalize(d.Entry)) {
			d.Already, d.ApprovalID = true, approval
			return d
		}
		d.Refused = fmt.Sprintf("the Dot already declares an MCP server named %q; only the person changes or removes a server", args.Name)
		return d
	}
	d.Write, d.ApprovalID = true, approval
	return d
}

// sameJSON compares two JSON documents as values.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// normalize makes empty and absent lists and maps compare equal.
func normalize(e protocol.MCPServerConfig) protocol.MCPServerConfig {
	if len(e.Args) == 0 {
		e.Args = nil
	}
	if len(e.Env) == 0 {
		e.Env = nil
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	if len(e.Secrets) == 0 {
		e.Secrets = nil
	} else {
		// The spec keeps secrets as a set: their order says nothing.
		e.Secrets = slices.Sorted(slices.Values(e.Secrets))
	}
	return e
}
