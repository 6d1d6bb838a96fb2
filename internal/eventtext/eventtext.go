// Package eventtext words a Dot's logged events for people: one line each,
// the same words for a tool call, an approval, a task or a state change
// wherever the command line shows one (logs, chat). Every type the log can
// hold has its words here; a test keeps it so.
package eventtext

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// Line is the event as one readable line, without its time.
func Line(e wire.Event) string {
	describe, ok := describers[e.Type]
	if !ok {
		return e.Type + " " + Cut(string(e.Data), 200)
	}
	text, err := describe(e)
	if err != nil {
		return e.Type + " (its data does not read: " + err.Error() + ")"
	}
	return text
}

// ToolLine words a tool the Dot ran: its name, what it acted on, and how it
// ended when that was not well.
func ToolLine(d protocol.ToolCalled) string {
	line := "ran " + d.Tool
	if d.Target != nil && *d.Target != "" {
		line += " " + Cut(*d.Target, 80)
	}
	switch {
	case d.Decision == protocol.Deny:
		line += " (denied)"
	case d.Interrupted != nil && *d.Interrupted:
		line += " (interrupted)"
	case !d.OK:
		line += " (failed)"
	}
	return line
}

// ApprovalLine words what a Dot asks a person.
func ApprovalLine(d protocol.ApprovalRequested) string {
	line := fmt.Sprintf("asks to run %s %s (%s)", d.Tool, Cut(ArgumentsText(d.Arguments), 120), d.Permission)
	if d.Reason != "" {
		line += ": " + Cut(d.Reason, 200)
	}
	return line
}

// ChannelStatusLine says a channel's state in words (its log line, and
// its Channel's Kubernetes Event).
func ChannelStatusLine(d wire.ChannelStatus) string {
	name := wire.ChannelKindName(d.Kind)
	var said string
	switch d.State {
	case "connected":
		said = name + " is connected"
	case "connecting":
		said = name + " is connecting"
	case "paused":
		said = name + " is paused"
	case "needs_relink":
		said = name + " needs to be linked again"
	default:
		said = name + " failed"
	}
	if d.Detail != "" {
		said += ": " + Cut(d.Detail, 300)
	}
	return said
}

// Cut makes s one line of at most max runes.
func Cut(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

// spent words what a step cost: its spend and the reasoning tokens the
// model reported for it, when either is known.
func spent(v *float64, reasoning *int64) string {
	var parts []string
	if v != nil && *v != 0 {
		parts = append(parts, fmt.Sprintf("$%.4f", *v))
	}
	if reasoning != nil && *reasoning > 0 {
		parts = append(parts, fmt.Sprintf("%d reasoning tokens", *reasoning))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func task(id *string) string {
	if id == nil {
		return ""
	}
	return " [task " + short(*id) + "]"
}

// short is a task's UID cut to its first group, enough to tell tasks apart
// in a log.
func short(uid string) string {
	if i := strings.IndexByte(uid, '-'); i > 0 {
		return uid[:i]
	}
	return uid
}

// describers word each type from its data.
var describers = map[string]func(e wire.Event) (string, error){
	wire.EventMessageUser: of(func(d wire.MessageUser) string {
		if d.Origin != nil {
			return "you, via " + wire.ChannelKindName(d.Origin.Channel) + ": " + Cut(d.Text, 300)
		}
		return "you: " + Cut(d.Text, 300)
	}),
	wire.EventChannelPeerPaired: of(func(d wire.ChannelPeerPaired) string {
		who := d.Label
		if who == "" {
			who = "a person"
		}
		return who + " paired through " + wire.ChannelKindName(d.Kind) + " and may talk to the Dot there"
	}),
	wire.EventChannelStatus: of(ChannelStatusLine),
	protocol.EventMessageAssistant: of(func(d protocol.MessageAssistant) string {
		return "dot: " + Cut(d.Text, 300) + spent(d.SpentUSD, d.ReasoningTokens)
	}),
	wire.EventGuestRefused: of(func(d wire.GuestEventRefused) string {
		return "the guest sent a " + d.Type + " event the protocol refuses: " + Cut(d.Reason, 200)
	}),
	wire.EventTaskCreated: of(func(d struct {
		TaskID string `json:"task_id"`
		Task   string `json:"task"`
		Run    int    `json:"run"`
	}) string {
		return fmt.Sprintf("task %s given to the Dot (run %d)", d.Task, d.Run)
	}),
	wire.EventTaskCancelled: of(func(d struct {
		Task string `json:"task"`
	}) string {
		return "task " + d.Task + " cancelled by a person"
	}),
	protocol.EventTaskStarted: of(func(d protocol.TaskStarted) string { return "task " + short(d.TaskID) + " started" }),
	protocol.EventTaskProgress: of(func(d protocol.TaskProgress) string {
		return "task " + short(d.TaskID) + ": " + Cut(d.Text, 200) + spent(d.SpentUSD, d.ReasoningTokens)
	}),
	protocol.EventTaskCompleted: of(func(d protocol.TaskCompleted) string {
		return "task " + short(d.TaskID) + " completed: " + Cut(d.Summary, 200) + spent(d.SpentUSD, d.ReasoningTokens)
	}),
	// The guest's task.failed and the host's (a task given up) share the
	// name and the two fields worded here.
	protocol.EventTaskFailed: of(func(d protocol.TaskFailed) string {
		return "task " + short(d.TaskID) + " failed: " + Cut(d.Error, 200) + spent(d.SpentUSD, d.ReasoningTokens)
	}),
	protocol.EventToolCalled: of(func(d protocol.ToolCalled) string {
		return ToolLine(d) + fmt.Sprintf(" in %s", time.Duration(d.DurationMS)*time.Millisecond) + tainted(d.TaintedBy) + task(d.TaskID)
	}),
	protocol.EventApprovalRequested: of(func(d protocol.ApprovalRequested) string {
		return ApprovalLine(d) + tainted(d.TaintedBy) + task(d.TaskID)
	}),
	wire.EventApprovalResolved: of(func(d struct {
		Approval string `json:"approval"`
		Decision string `json:"decision"`
		Always   bool   `json:"always"`
	}) string {
		line := "approval " + d.Approval + ": " + d.Decision
		if d.Always {
			line += ", and allowed from now on"
		}
		return line
	}),
	protocol.EventAgentStarted: of(func(protocol.AgentStarted) string {
		return "the engine started (the key and the configuration were sent again)"
	}),
	protocol.EventAgentState: of(func(d protocol.AgentStateChanged) string { return "the agent is " + string(d.State) }),
	wire.EventDotCreated: of(func(d struct {
		Generation int64 `json:"generation"`
	}) string {
		return fmt.Sprintf("the Dot was made (generation %d)", d.Generation)
	}),
	wire.EventDotUpdated: of(func(d struct {
		Generation     int64  `json:"generation"`
		Permission     string `json:"permission"`
		MCPServerAdded string `json:"mcp_server_added"`
	}) string {
		if d.MCPServerAdded != "" {
			return fmt.Sprintf("the MCP server %s the Dot asked for was added to its configuration", d.MCPServerAdded)
		}
		if d.Permission != "" {
			return fmt.Sprintf("%s set to allow by an approval (generation %d)", d.Permission, d.Generation)
		}
		return fmt.Sprintf("the Dot's configuration changed (generation %d)", d.Generation)
	}),
	wire.EventMCPServerRefused: of(func(d struct {
		Name   string `json:"name"`
		Reason string `json:"reason"`
	}) string {
		return fmt.Sprintf("the MCP server %s the Dot asked for was not added: %s", d.Name, Cut(d.Reason, 200))
	}),
	wire.EventComputerState: of(func(d struct {
		State      string `json:"state"`
		StopReason string `json:"stop_reason"`
	}) string {
		if d.StopReason != "" {
			return "the computer is " + d.State + " (" + d.StopReason + ")"
		}
		return "the computer is " + d.State
	}),
	protocol.EventBrowserIdentityCreated: browser("made the browser identity"),
	protocol.EventBrowserIdentityDeleted: browser("deleted the browser identity"),
	protocol.EventBrowserIdentityLaunch:  of(launched),
	protocol.EventBrowserIdentityClosed: of(func(d protocol.BrowserIdentityEvent) string {
		if d.Reason != nil && *d.Reason == protocol.BrowserClosedCrashed {
			return "the browser of the identity " + d.Name + " crashed; it opens again only when launched"
		}
		return "closed the browser identity " + d.Name
	}),
	protocol.EventAutomationNextRun: of(func(d protocol.AutomationNextRun) string {
		if d.NextRunAtMS == nil {
			return "no automation is due"
		}
		return "the next automation is due at " + time.UnixMilli(*d.NextRunAtMS).UTC().Format(time.RFC3339)
	}),
	protocol.EventMemoryUpdated: of(func(d protocol.MemoryUpdated) string {
		if !d.Changed {
			return fmt.Sprintf("memory read %d conversations; nothing new", d.Conversations) + spent(d.SpentUSD, d.ReasoningTokens)
		}
		return fmt.Sprintf("memory updated from %d conversations", d.Conversations) + spent(d.SpentUSD, d.ReasoningTokens)
	}),
	protocol.EventMCPServerAdded: of(func(d protocol.MCPServerAdded) string {
		return "added an MCP server " + Cut(ArgumentsText(d.Arguments), 200)
	}),
	protocol.EventOutboxReset: of(func(d protocol.OutboxReset) string {
		return fmt.Sprintf("the computer's event record was lost and started over: it held %d events after the log's %d, and its events go on from there", d.LastSeq, d.Cursor)
	}),
}

// of is a describer of events whose data reads as T.
func of[T any](word func(T) string) func(e wire.Event) (string, error) {
	return func(e wire.Event) (string, error) {
		var d T
		if len(e.Data) > 0 {
			if err := json.Unmarshal(e.Data, &d); err != nil {
				return "", err
			}
		}
		return word(d), nil
	}
}

// launched says where the launch placed the browser, when it did (ref 6:
// the time zone and locale of its exit).
func launched(d protocol.BrowserIdentityEvent) string {
	text := "opened the browser identity " + d.Name
	var place []string
	if d.TimeZone != nil {
		place = append(place, *d.TimeZone)
	}
	if d.Locale != nil {
		place = append(place, *d.Locale)
	}
	if len(place) > 0 {
		text += " (placed at its exit: " + strings.Join(place, ", ") + ")"
	}
	return text
}

func browser(what string) func(e wire.Event) (string, error) {
	return of(func(d protocol.BrowserIdentityEvent) string { return what + " " + d.Name })
}

// tainted says what untrusted input the turn had read (tainted_by), or "".
func tainted(t *protocol.Taint) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf(" (after untrusted input: %s %s)", t.Kind, t.Source)
}

// ArgumentsText is a call's JSON arguments as a person reads them: <, >
// and & as themselves. The engine's encoder writes them as \u003c, \u003e
// and \u0026 (HTML-safe JSON), which turns "a >> b && c" into something
// nobody can judge. Only those three escapes change; the text is otherwise
// as it came, its keys in their order.
func ArgumentsText(raw json.RawMessage) string {
	s := string(raw)
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		// A backslash always begins a two-character escape (or \uXXXX):
		// copying it whole keeps an escaped backslash from being read as
		// the start of another.
		if s[i+1] == 'u' && i+6 <= len(s) {
			switch strings.ToLower(s[i+2 : i+6]) {
			case "003c":
				b.WriteByte('<')
				i += 5
				continue
			case "003e":
				b.WriteByte('>')
				i += 5
				continue
			case "0026":
				b.WriteByte('&')
				i += 5
				continue
			}
		}
		b.WriteString(s[i : i+2])
		i++
	}
	return b.String()
}
