package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// OutboundEvent is one row of the guest's outbox as it travels on
// GET /events/stream (ref 5.4): seq is the outbox's, monotonically increasing
// and never reused for another event.
type OutboundEvent struct {
	Seq  int64           `json:"seq"`
	ID   string          `json:"id"`
	Type string          `json:"type"`
	TS   string          `json:"ts"`
	Data json.RawMessage `json:"data"`
}

// InboundEvent is what the host sends with POST /events (ref 5.4). The guest
// keeps every accepted id and ignores one it already has, so the host may send
// an event again whenever the outcome of a send is unknown.
type InboundEvent struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	TS   string          `json:"ts"`
	Data json.RawMessage `json:"data"`
}

// Inbound event types (host to guest).
const (
	InboundUserMessage      = "user.message"
	InboundTaskCreated      = "task.created"
	InboundApprovalReceived = "approval.received"
	InboundSystemEvent      = "system.event"
)

// InboundTypes lists every inbound type the guest accepts.
var InboundTypes = []string{InboundUserMessage, InboundTaskCreated, InboundApprovalReceived, InboundSystemEvent}

// SystemEventTaskCancelled is the name of the system.event that cancels a
// task whose task.created may have reached the guest.
const SystemEventTaskCancelled = "task.cancelled"

// Outbound event types (guest to host).
const (
	EventAgentStarted           = "agent.started"
	EventAgentState             = "agent.state"
	EventMessageAssistant       = "message.assistant"
	EventTaskStarted            = "task.started"
	EventTaskProgress           = "task.progress"
	EventTaskCompleted          = "task.completed"
	EventTaskFailed             = "task.failed"
	EventApprovalRequested      = "approval.requested"
	EventToolCalled             = "tool.called"
	EventBrowserIdentityCreated = "browser.identity.created"
	EventBrowserIdentityDeleted = "browser.identity.deleted"
	EventBrowserIdentityLaunch  = "browser.identity.launched"
	EventBrowserIdentityClosed  = "browser.identity.closed"
	EventAutomationNextRun      = "automation.next_run"
	EventMemoryUpdated          = "memory.updated"
	EventMCPServerAdded         = "mcp.server.added"
	// EventOutboxReset: the host asked for events after a seq the outbox
	// never reached (the guest lost its database); the outbox moved on to
	// the host's cursor and says so (OutboxReset).
	EventOutboxReset = "guest.outbox.reset"
)

// OutboundTypes lists every outbound type of ref 5.4, in the reference's order.
var OutboundTypes = []string{
	EventAgentStarted, EventAgentState, EventMessageAssistant, EventTaskStarted, EventTaskProgress,
	EventTaskCompleted, EventTaskFailed, EventApprovalRequested, EventToolCalled,
	EventBrowserIdentityCreated, EventBrowserIdentityDeleted, EventBrowserIdentityLaunch, EventBrowserIdentityClosed,
	EventAutomationNextRun, EventMemoryUpdated, EventMCPServerAdded, EventOutboxReset,
}

// AgentState is the runtime's state (ref 8.1).
type AgentState string

const (
	StateIdle            AgentState = "IDLE"
	StateThinking        AgentState = "THINKING"
	StatePlanning        AgentState = "PLANNING" // named by the protocol; the engine never reports it
	StateExecuting       AgentState = "EXECUTING"
	StateWaitingApproval AgentState = "WAITING_APPROVAL"
	StateDone            AgentState = "DONE"
)

// AgentStates lists every state the protocol names.
var AgentStates = []AgentState{StateIdle, StateThinking, StatePlanning, StateExecuting, StateWaitingApproval, StateDone}

// ApprovalDecision is the person's answer to an approval.
type ApprovalDecision string

const (
	ApprovalApprove ApprovalDecision = "approve"
	ApprovalReject  ApprovalDecision = "reject"
)

// Limits of event texts (ref 5.4).
const (
	// ToolTargetMax is TOOL_TARGET_MAX: a tool.called target is one line of
	// at most this many code points.
	ToolTargetMax = 160
	// TaskProgressMax is the longest task.progress text, in code points, the
	// last one an ellipsis when cut.
	TaskProgressMax = 2000
)

// Inbound data shapes.

// UserMessage is the data of user.message.
type UserMessage struct {
	Text string `json:"text"`
}

// TaskCreated is the data of task.created.
type TaskCreated struct {
	TaskID      string `json:"task_id"`
	Description string `json:"description"`
	Priority    int    `json:"priority"`
	// RequestedBy is the Dot that asked for the task (delegate_task), absent
	// for a person's: its description is untrusted input.
	RequestedBy *string `json:"requested_by,omitempty"`
}

// ApprovalReceived is the data of approval.received.
type ApprovalReceived struct {
	ApprovalID string           `json:"approval_id"`
	Decision   ApprovalDecision `json:"decision"`
	Note       *string          `json:"note,omitempty"`
	// Scope "task" (ApprovalScopeTask) on an approval asked because the
	// turn was tainted also allows that permission's taint-asks for the
	// rest of the task (or of the chat's turn); absent is this call only.
	Scope *string `json:"scope,omitempty"`
}

// ApprovalScopeTask is ApprovalReceived's scope "allow for the rest of this
// task".
const ApprovalScopeTask = "task"

// Taint is what made a turn tainted: the first untrusted input that entered
// the model's context (tool.called and approval.requested tainted_by).
type Taint struct {
	// Kind is one of the Taint* kinds.
	Kind string `json:"kind"`
	// Source names it: a URL, a file, a server, a webhook, a Dot.
	Source string `json:"source"`
}

// The kinds of untrusted input.
const (
	TaintPage       = "page"       // a browser page's text or screenshot
	TaintScreenshot = "screenshot" // a screenshot of the desktop
	TaintDownload   = "download"   // a file under ~/downloads
	TaintMCP        = "mcp"        // an MCP server's result (not trusted)
	TaintWebhook    = "webhook"    // a webhook's payload in a task's description
	TaintDelegation = "delegation" // a task, or an answer, from another Dot
)

// SystemEvent is the data of system.event.
type SystemEvent struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data"`
}

// TaskCancelled is the data of the system.event named task.cancelled.
type TaskCancelled struct {
	TaskID string `json:"task_id"`
}

// SystemEventDelegation is the name of the system.event that tells a Dot
// what became of a request it made of another Dot with delegate_task: the
// other Dot's answer, a refusal, a cancellation. The engine puts its text in
// the chat as a message to answer.
const SystemEventDelegation = "delegation"

// Delegation is the data of the system.event named delegation.
type Delegation struct {
	// Dot is the Dot that was asked.
	Dot string `json:"dot"`
	// Task is the receiver's task, when one was made.
	Task string `json:"task,omitempty"`
	// Outcome is what became of the request: a Task phase (COMPLETED,
	// FAILED, CANCELLED) or DelegationRefused.
	Outcome string `json:"outcome"`
	// Text is what the Dot is told, written by the host.
	Text string `json:"text"`
}

// Outcomes of a delegation besides a Task's end: the host passed the
// request on (a note the engine keeps without a chat turn: the Dot knows it
// asked) or refused it.
const (
	DelegationAccepted = "ACCEPTED"
	DelegationRefused  = "REFUSED"
)

// Outbound data shapes. Optional keys are pointers with omitempty, so an
// absent key and a zero value stay distinct on the wire.
//
// reasoning_tokens, beside spent_usd on the events that carry it, is the
// reasoning tokens the model reported (completion_tokens_details.
// reasoning_tokens, a part of the completion) from the same ledger and over
// the same span as spent_usd; absent while none was reported.

// AgentStarted is the data of agent.started: always {}.
type AgentStarted struct{}

// AgentStateChanged is the data of agent.state.
type AgentStateChanged struct {
	State AgentState `json:"state"`
}

// MessageAssistant is the data of message.assistant.
type MessageAssistant struct {
	Text            string   `json:"text"`
	InReplyTo       *string  `json:"in_reply_to,omitempty"`
	SpentUSD        *float64 `json:"spent_usd,omitempty"`
	ReasoningTokens *int64   `json:"reasoning_tokens,omitempty"`
}

// TaskStarted is the data of task.started.
type TaskStarted struct {
	TaskID string `json:"task_id"`
}

// TaskProgress is the data of task.progress.
type TaskProgress struct {
	TaskID          string   `json:"task_id"`
	Text            string   `json:"text"`
	SpentUSD        *float64 `json:"spent_usd,omitempty"`
	ReasoningTokens *int64   `json:"reasoning_tokens,omitempty"`
}

// TaskCompleted is the data of task.completed.
type TaskCompleted struct {
	TaskID          string   `json:"task_id"`
	Summary         string   `json:"summary"`
	SpentUSD        *float64 `json:"spent_usd,omitempty"`
	ReasoningTokens *int64   `json:"reasoning_tokens,omitempty"`
}

// TaskFailed is the data of task.failed.
type TaskFailed struct {
	TaskID          string   `json:"task_id"`
	Error           string   `json:"error"`
	SpentUSD        *float64 `json:"spent_usd,omitempty"`
	ReasoningTokens *int64   `json:"reasoning_tokens,omitempty"`
}

// ApprovalRequested is the data of approval.requested. Arguments are the
// call's, with secrets redacted where the event is built.
type ApprovalRequested struct {
	ApprovalID string          `json:"approval_id"`
	TaskID     *string         `json:"task_id,omitempty"`
	Tool       string          `json:"tool"`
	Permission string          `json:"permission"`
	Arguments  json.RawMessage `json:"arguments"`
	Reason     string          `json:"reason"`
	// TaintedBy is present when the call was asked because the turn read
	// untrusted input (the reason says it in words).
	TaintedBy *Taint `json:"tainted_by,omitempty"`
}

// ToolCalled is the data of tool.called. TTY and Interrupted are present
// only when true.
type ToolCalled struct {
	TaskID      *string  `json:"task_id,omitempty"`
	Tool        string   `json:"tool"`
	Permission  string   `json:"permission"`
	Decision    Decision `json:"decision"`
	OK          bool     `json:"ok"`
	DurationMS  int64    `json:"duration_ms"`
	Target      *string  `json:"target,omitempty"`
	TTY         *bool    `json:"tty,omitempty"`
	Interrupted *bool    `json:"interrupted,omitempty"`
	// Arguments are the call's arguments, only on the calls the host acts
	// on (delegate_task): absent on every other tool's.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// TaintedBy is present when the turn is tainted by untrusted input:
	// read before the call was decided, or by this call's own result (the
	// page it read).
	TaintedBy *Taint `json:"tainted_by,omitempty"`
}

// BrowserIdentityEvent is the data of every browser.identity.* event.
// Reason is on browser.identity.closed only, and only when the identity was
// not asked to close: BrowserClosedCrashed, its browser or the browser's
// server ended under it (ref 6: closed once, and the calls say crashed).
//
// TimeZone and Locale are on browser.identity.launched only, when the
// launch gave the browser its exit's (ref 6: they follow the exit the
// browser uses); absent, it has the computer's.
type BrowserIdentityEvent struct {
	IdentityID string  `json:"identity_id"`
	Name       string  `json:"name"`
	Reason     *string `json:"reason,omitempty"`
	TimeZone   *string `json:"timezone,omitempty"`
	Locale     *string `json:"locale,omitempty"`
}

// BrowserClosedCrashed is the reason of a browser.identity.closed whose
// browser crashed.
const BrowserClosedCrashed = "crashed"

// AutomationNextRun is the data of automation.next_run; a nil time (no
// enabled job is due) travels as null, never as an absent key.
type AutomationNextRun struct {
	NextRunAtMS *int64 `json:"next_run_at_ms"`
}

// MemoryUpdated is the data of memory.updated.
type MemoryUpdated struct {
	Conversations   int      `json:"conversations"`
	Changed         bool     `json:"changed"`
	SpentUSD        *float64 `json:"spent_usd,omitempty"`
	ReasoningTokens *int64   `json:"reasoning_tokens,omitempty"`
}

// MCPServerAdded is the data of mcp.server.added: the add_mcp_server call's
// arguments as the model made them.
type MCPServerAdded struct {
	Arguments json.RawMessage `json:"arguments"`
}

// OutboxReset is the data of guest.outbox.reset (the cursor rule, ref 5.3):
// the host's stream asked for events after Cursor while the outbox ended at
// LastSeq. The outbox's next seq follows Cursor, so nothing the guest sends
// from then on falls under what the host already holds; rows LastSeq had
// before (written after the database was lost) were never streamed.
type OutboxReset struct {
	Cursor  int64 `json:"cursor"`
	LastSeq int64 `json:"last_seq"`
}

// RoundUSD rounds a spend to the hundred-millionth of a USD, the precision
// spent_usd carries (ref 5.4).
func RoundUSD(v float64) float64 {
	const scale = 1e8
	if v < 0 {
		return -RoundUSD(-v)
	}
	return float64(int64(v*scale+0.5)) / scale
}

// ParseOutbound decodes the data of an outbound event into its shape and
// checks what the host's schema checks: the type is known, the required keys
// are present with the right JSON types, and the texts keep their limits.
// Unknown keys are ignored (the host's schemas strip them).
func ParseOutbound(ev OutboundEvent) (any, error) {
	if ev.Seq <= 0 {
		return nil, fmt.Errorf("outbound event %q has seq %d: a seq starts at 1", ev.ID, ev.Seq)
	}
	if ev.ID == "" || ev.TS == "" {
		return nil, fmt.Errorf("outbound event of seq %d lacks its id or ts", ev.Seq)
	}
	var (
		out      any
		required []string
	)
	switch ev.Type {
	case EventAgentStarted:
		out = &AgentStarted{}
	case EventAgentState:
		out, required = &AgentStateChanged{}, []string{"state"}
	case EventMessageAssistant:
		out, required = &MessageAssistant{}, []string{"text"}
	case EventTaskStarted:
		out, required = &TaskStarted{}, []string{"task_id"}
	case EventTaskProgress:
		out, required = &TaskProgress{}, []string{"task_id", "text"}
	case EventTaskCompleted:
		out, required = &TaskCompleted{}, []string{"task_id", "summary"}
	case EventTaskFailed:
		out, required = &TaskFailed{}, []string{"task_id", "error"}
	case EventApprovalRequested:
		out, required = &ApprovalRequested{}, []string{"approval_id", "tool", "permission", "arguments", "reason"}
	case EventToolCalled:
		out, required = &ToolCalled{}, []string{"tool", "permission", "decision", "ok", "duration_ms"}
	case EventBrowserIdentityCreated, EventBrowserIdentityDeleted, EventBrowserIdentityLaunch, EventBrowserIdentityClosed:
		out, required = &BrowserIdentityEvent{}, []string{"identity_id", "name"}
	case EventAutomationNextRun:
		out, required = &AutomationNextRun{}, []string{"next_run_at_ms"}
	case EventMemoryUpdated:
		out, required = &MemoryUpdated{}, []string{"conversations", "changed"}
	case EventMCPServerAdded:
		out, required = &MCPServerAdded{}, []string{"arguments"}
	case EventOutboxReset:
		out, required = &OutboxReset{}, []string{"cursor", "last_seq"}
	default:
		return nil, fmt.Errorf("outbound event of seq %d has unknown type %q", ev.Seq, ev.Type)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(ev.Data, &keys); err != nil || keys == nil {
		return nil, fmt.Errorf("data of %s (seq %d) is not a JSON object", ev.Type, ev.Seq)
	}
	for _, k := range required {
		if _, ok := keys[k]; !ok {
			return nil, fmt.Errorf("data of %s (seq %d) lacks %q", ev.Type, ev.Seq, k)
		}
	}
	if err := json.Unmarshal(ev.Data, out); err != nil {
		return nil, fmt.Errorf("data of %s (seq %d): %w", ev.Type, ev.Seq, err)
	}
	if err := checkOutbound(out); err != nil {
		return nil, fmt.Errorf("data of %s (seq %d): %w", ev.Type, ev.Seq, err)
	}
	return out, nil
}

func checkOutbound(v any) error {
	switch d := v.(type) {
	case *AgentStateChanged:
		for _, s := range AgentStates {
			if d.State == s {
				return nil
			}
		}
		return fmt.Errorf("unknown state %q", d.State)
	case *ToolCalled:
		if d.Decision != Allow && d.Decision != Ask && d.Decision != Deny {
			return fmt.Errorf("unknown decision %q", d.Decision)
		}
		if d.Target != nil {
			if err := CheckToolTarget(*d.Target); err != nil {
				return err
			}
		}
	case *TaskProgress:
		if utf8.RuneCountInString(d.Text) > TaskProgressMax {
			return fmt.Errorf("text is longer than %d characters", TaskProgressMax)
		}
		return checkReasoningTokens(d.ReasoningTokens)
	case *ApprovalRequested:
		if !isJSONObject(d.Arguments) {
			return fmt.Errorf("arguments are not a JSON object")
		}
	case *MCPServerAdded:
		if !isJSONObject(d.Arguments) {
			return fmt.Errorf("arguments are not a JSON object")
		}
	case *MessageAssistant:
		return checkReasoningTokens(d.ReasoningTokens)
	case *TaskCompleted:
		return checkReasoningTokens(d.ReasoningTokens)
	case *TaskFailed:
		return checkReasoningTokens(d.ReasoningTokens)
	case *MemoryUpdated:
		return checkReasoningTokens(d.ReasoningTokens)
	case *BrowserIdentityEvent:
		if d.Reason != nil && *d.Reason != BrowserClosedCrashed {
			return fmt.Errorf("unknown reason %q", *d.Reason)
		}
	}
	return nil
}

func checkReasoningTokens(n *int64) error {
	if n != nil && *n < 0 {
		return fmt.Errorf("reasoning_tokens is %d, below zero", *n)
	}
	return nil
}

// CheckToolTarget applies the host's rule for tool.called's target: one line,
// not empty, at most ToolTargetMax code points.
func CheckToolTarget(target string) error {
	switch {
	case target == "":
		return fmt.Errorf("target is empty")
	case strings.ContainsAny(target, "\r\n"):
		return fmt.Errorf("target holds more than one line")
	case utf8.RuneCountInString(target) > ToolTargetMax:
		return fmt.Errorf("target is longer than %d characters", ToolTargetMax)
	}
	return nil
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// ParseInbound decodes the data of an inbound event and checks it, so a
// malformed event is refused at POST /events and never recorded.
func ParseInbound(ev InboundEvent) (any, error) {
	if strings.TrimSpace(ev.ID) == "" {
		return nil, fmt.Errorf("the event has no id")
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(ev.Data, &keys); err != nil || keys == nil {
		return nil, fmt.Errorf("data of %s is not a JSON object", ev.Type)
	}
	switch ev.Type {
	case InboundUserMessage:
		var d UserMessage
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return nil, fmt.Errorf("data of user.message: %w", err)
		}
		if strings.TrimSpace(d.Text) == "" {
			return nil, fmt.Errorf("user.message has no text")
		}
		return &d, nil
	case InboundTaskCreated:
		var d TaskCreated
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return nil, fmt.Errorf("data of task.created: %w", err)
		}
		if d.TaskID == "" || strings.TrimSpace(d.Description) == "" {
			return nil, fmt.Errorf("task.created needs task_id and description")
		}
		return &d, nil
	case InboundApprovalReceived:
		var d ApprovalReceived
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return nil, fmt.Errorf("data of approval.received: %w", err)
		}
		if d.ApprovalID == "" {
			return nil, fmt.Errorf("approval.received has no approval_id")
		}
		if d.Decision != ApprovalApprove && d.Decision != ApprovalReject {
			return nil, fmt.Errorf("approval.received decision %q is neither approve nor reject", d.Decision)
		}
		return &d, nil
	case InboundSystemEvent:
		var d SystemEvent
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return nil, fmt.Errorf("data of system.event: %w", err)
		}
		if d.Name == "" {
			return nil, fmt.Errorf("system.event has no name")
		}
		if d.Name == SystemEventDelegation {
			var c Delegation
			if err := json.Unmarshal(d.Data, &c); err != nil || c.Dot == "" || strings.TrimSpace(c.Text) == "" {
				return nil, fmt.Errorf("system.event delegation needs data.dot and data.text")
			}
		}
		if d.Name == SystemEventTaskCancelled {
			var c TaskCancelled
			if err := json.Unmarshal(d.Data, &c); err != nil || c.TaskID == "" {
				return nil, fmt.Errorf("system.event task.cancelled needs data.task_id")
			}
		}
		return &d, nil
	}
	return nil, fmt.Errorf("unknown inbound event type %q (the types are: %s)", ev.Type, strings.Join(InboundTypes, ", "))
}
