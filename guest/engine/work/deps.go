// Package work is the Dot's runtime (ref 8.1 to 8.8): it accepts the host's
// inbound events, decides which turn runs (the chat, one task at a time),
// drives each turn against the model, decides every tool call at the gate,
// parks calls for approval, and recovers after a crash without running a
// call twice. Every commit point is one store transaction that carries the
// outbox rows describing it.
package work

import (
	"context"
	"encoding/json"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/engine/openrouter"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Model is the OpenRouter client the turns use.
type Model interface {
	Complete(ctx context.Context, key string, req openrouter.Request) (openrouter.Response, error)
	ModelLimits(ctx context.Context, key, model string) (openrouter.Limits, error)
}

// Tool is one row of the tool table as the engine needs it.
type Tool struct {
	Name        string
	Permission  string
	Description string
	Parameters  json.RawMessage
	// OfferedWhen is the tool's condition beside its permission (the
	// table's Spec.OfferedWhen); nil offers it whenever the permission is
	// not deny.
	OfferedWhen func(cfg protocol.RuntimeConfig) bool
	// StartsTerminal is the table's Spec.StartsTerminal: whether a call
	// starts a terminal session (tool.called tty); nil means never.
	StartsTerminal func(args map[string]any) bool
}

// offered says whether the model is offered the tool under cfg.
func (t Tool) offered(cfg protocol.RuntimeConfig) bool {
	return cfg.Decision(t.Permission) != protocol.Deny && (t.OfferedWhen == nil || t.OfferedWhen(cfg))
}

// ToolResult is a call's outcome.
type ToolResult struct {
	Text        string
	OK          bool
	Interrupted bool
	TTY         bool
	// Events are outbound events the outcome stands for, committed with the
	// result (add_mcp_server's mcp.server.added), so a restart neither loses
	// nor repeats them.
	Events []ToolEvent
	// ImageURLs are images the model is shown (data: URLs), held in memory
	// for the rest of the turn only; Text holds their placeholders (ref 6).
	ImageURLs []string
	// CalledArguments go into the call's tool.called (delegate_task's,
	// which the host acts on); nil for every other call.
	CalledArguments json.RawMessage
}

// Browsers are the Dot's open browsers, which a stop closes (ref 5.3
// prepare-sleep, ref 6: on prepare-sleep and on SIGTERM).
type Browsers interface {
	CloseAll(ctx context.Context)
}

// ToolEvent is one outbound event of a call's result.
type ToolEvent struct {
	Type string
	Data any
}

// MCPServers runs the MCP servers a Dot's config declares (ref 8.3): their
// tools come to the engine through the Toolbox, under mcp.<server>, and are
// decided by the same gate as every other tool.
type MCPServers interface {
	// Apply starts, restarts and stops servers to match the config and the
	// secrets the host pushed; a server whose entry and secrets did not
	// change is left as it is.
	Apply(cfg *protocol.RuntimeConfig, secrets map[string]map[string]string)
	// Ready waits for the servers being started, each for at most its
	// startup timeout, after starting again those that failed for a reason
	// that may have gone (a program installed since); ctx bounds the wait.
	Ready(ctx context.Context)
	// Status is every declared server by name with its state (GET /tools).
	Status() []protocol.MCPServerStatus
}

// Toolbox is the tool table and the tools (guest/engine/tools in the product).
type Toolbox interface {
	// Tools is the table, in its order.
	Tools() []Tool
	// Validate checks a call's arguments against the tool's schema; an
	// invalid call never reaches the gate.
	Validate(name string, raw json.RawMessage) (map[string]any, error)
	// Target is what a call acts on (tool.called target), "" for nothing.
	Target(name string, args map[string]any) string
	// ApprovalArguments are the arguments an approval.requested may carry.
	ApprovalArguments(name string, args map[string]any) map[string]any
	// Run runs a validated, admitted call.
	Run(ctx context.Context, name string, args json.RawMessage) ToolResult
}

// PromptBuilder builds a system prompt from what was read of the Dot's files
// beforehand (PromptReader).
type PromptBuilder func(cfg protocol.RuntimeConfig, tools []Tool, now time.Time) string

// PromptReader is a Memory that reads what its system prompt shows of the
// Dot's files apart from building it: the chat's turn that a message opens
// as it is accepted reads them while that message commits, and builds its
// first request's prompt from them.
type PromptReader interface {
	ReadPrompt(ctx context.Context) PromptBuilder
}

// Memory is what the engine asks of the Dot's memory and context (ref 8.6).
type Memory interface {
	// SystemPrompt is the Dot's section of the system prompt for a turn.
	SystemPrompt(ctx context.Context, cfg protocol.RuntimeConfig, tools []Tool, now time.Time) string
	// Transcribe writes a session's conversation file from its transcript,
	// after a turn. Failures are logged, never fatal.
	Transcribe(ctx context.Context, session string, title string, msgs []Message)
	// Transcribed is the newest message id of the session its files were
	// written with (0 before any). The chat's files are one a day and only
	// the days holding a newer message are written again, so a turn gives
	// Transcribe the chat's messages from the first of those days only.
	Transcribed(session string) int64
}

// Message is one transcript row.
type Message struct {
	ID         int64
	Role       string // user, assistant, tool
	Content    string
	ToolCalls  []Call
	ToolCallID string
	ToolName   string
	InboundID  string
	At         time.Time
	Cleared    bool
	// Reasoning and ReasoningDetails are an assistant message's reasoning as
	// the model gave it, sent back unchanged (ref 8.6); the conversation
	// files never show it.
	Reasoning        string
	ReasoningDetails json.RawMessage
}

// Call is one tool call of an assistant message.
type Call struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}
