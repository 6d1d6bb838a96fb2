package hub

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// Sender is what the way out needs of an adapter.
type Sender interface {
	Replier
	Prompter
	// Typing shows the Dot at work in chat, best effort.
	Typing(ctx context.Context, chat string) error
}

// Outbound is the way out of one binding (ref 9.8): it reads the Dot's log
// from where the binding stands and sends to the chats what goes there.
// An answer goes to the chat of the message it answers, when that message
// came through this binding and its person is still paired; an answer that
// answers nothing (an automation's), and a task's end, go to every owner
// unless NotifyTasks is off; an answer to the web or another channel is
// not mirrored. THINKING shows typing in the chat of the message not yet
// answered. The cursor moves after a send succeeded, so a restart resumes
// there; a send the channel refuses for good is dropped.
type Outbound struct {
	Binding     Binding
	Store       *store.Store
	Send        Sender
	NotifyTasks bool
	// Prompts are the binding's approval prompts; nil sends none.
	Prompts *Prompts
	Log     logr.Logger

	// cursor is where the way out stands in the log (read is whether it
	// was read from the store yet).
	cursor int64
	read   bool
	// waiting is the chat of this binding's message the Dot has not
	// answered yet, where typing shows.
	waiting string
}

// outboundBatch is how many events one read takes.
const outboundBatch = 100

// Step sends what the log holds past the binding's cursor, until it is
// read to its end. An error leaves the cursor before the event that failed
// (a channels.RetryAfterError says how long to wait); the caller retries
// with backoff.
func (o *Outbound) Step(ctx context.Context) error {
	// The stored cursor is read once; it moves only through this way out.
	if !o.read {
		c, err := o.Store.ChannelCursor(ctx, o.Binding.UID, o.Binding.Dot.UID)
		if err != nil {
			return err
		}
		o.cursor, o.read = c, true
	}
	cursor := o.cursor
	defer func() { o.cursor = cursor }()
	for {
		events, err := o.Store.EventsAfter(ctx, o.Binding.Dot.UID, cursor, outboundBatch)
		if err != nil {
			return err
		}
		if len(events) == 0 {
			return nil
		}
		// Events that need no send move the cursor in one write at the
		// end of the batch, or before the next send.
		moved := cursor
		for _, e := range events {
			sent, err := o.deliver(ctx, e)
			if err != nil {
				if moved != cursor && o.Store.SetChannelCursor(ctx, o.Binding.UID, moved) == nil {
					cursor = moved
				}
				return err
			}
			moved = e.ID
			if sent {
				if err := o.Store.SetChannelCursor(ctx, o.Binding.UID, moved); err != nil {
					return err
				}
				cursor = moved
			}
		}
		if moved != cursor {
			if err := o.Store.SetChannelCursor(ctx, o.Binding.UID, moved); err != nil {
				return err
			}
			cursor = moved
		}
		if len(events) < outboundBatch {
			return nil
		}
	}
}

// deliver sends what e asks of the chats; sent says a send was made (the
// cursor is then written at once).
func (o *Outbound) deliver(ctx context.Context, e store.Event) (bool, error) {
	switch e.Type {
	case wire.EventMessageUser:
		var d wire.MessageUser
		if json.Unmarshal(e.Data, &d) == nil {
			o.waiting = ""
			if d.Origin != nil && d.Origin.BindingID == o.Binding.UID {
				o.waiting = d.Origin.ChatID
			}
		}
		return false, nil
	case protocol.EventAgentState:
		var d protocol.AgentStateChanged
		if json.Unmarshal(e.Data, &d) == nil && d.State == protocol.StateThinking && o.waiting != "" {
			// Typing is a hint: never retried, never holding the cursor.
			_ = o.Send.Typing(ctx, o.waiting)
		}
		return false, nil
	case protocol.EventMessageAssistant:
		var d protocol.MessageAssistant
		if json.Unmarshal(e.Data, &d) != nil || strings.TrimSpace(d.Text) == "" {
			return false, nil
		}
		o.waiting = ""
		if d.InReplyTo == nil || *d.InReplyTo == "" {
			if !o.NotifyTasks {
				return false, nil
			}
			return o.toOwners(ctx, d.Text)
		}
		chat, ok, err := o.chatOf(ctx, *d.InReplyTo)
		if err != nil || !ok {
			return false, err
		}
		return o.sendTo(ctx, chat, d.Text)
	case protocol.EventApprovalRequested:
		var d protocol.ApprovalRequested
		if o.Prompts == nil || json.Unmarshal(e.Data, &d) != nil {
			return false, nil
		}
		return o.Prompts.Ask(ctx, Asked{ID: d.ApprovalID, TaskID: deref(d.TaskID), Tool: d.Tool, Permission: d.Permission, Reason: d.Reason, Arguments: d.Arguments})
	case wire.EventApprovalResolved:
		var d struct {
			ApprovalID string `json:"approval_id"`
			Decision   string `json:"decision"`
		}
		if o.Prompts == nil || json.Unmarshal(e.Data, &d) != nil {
			return false, nil
		}
		outcome := OutcomeRejected
		switch d.Decision {
		case wire.DecisionApprove:
			outcome = OutcomeApproved
		case wire.DecisionExpired:
			outcome = OutcomeExpired
		}
		return o.Prompts.Settle(ctx, d.ApprovalID, "", outcome)
	case wire.EventTaskCancelled:
		// Its prompts are moot.
		return o.settleTask(ctx, e)
	case protocol.EventTaskCompleted, protocol.EventTaskFailed:
		// The guest's or the control plane's (the same type): its prompts
		// are moot, and the owners are told.
		settled, err := o.settleTask(ctx, e)
		if err != nil || !o.NotifyTasks {
			return settled, err
		}
		sent, err := o.toOwners(ctx, taskEnding(e))
		return settled || sent, err
	}
	return false, nil
}

// settleTask edits the open prompts of the task e ended to "No longer
// needed".
func (o *Outbound) settleTask(ctx context.Context, e store.Event) (bool, error) {
	var d struct {
		TaskID string `json:"task_id"`
	}
	if o.Prompts == nil || json.Unmarshal(e.Data, &d) != nil || d.TaskID == "" {
		return false, nil
	}
	return o.Prompts.Settle(ctx, "", d.TaskID, OutcomeExpired)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// chatOf is the chat of this binding's message that messageID names, when
// its person is still paired.
func (o *Outbound) chatOf(ctx context.Context, messageID string) (string, bool, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(messageID, "message-"), 10, 64)
	if err != nil || wire.MessageID(id) != messageID {
		return "", false, nil
	}
	e, ok, err := o.Store.EventOf(ctx, o.Binding.Dot.UID, id)
	if err != nil || !ok || e.Type != wire.EventMessageUser {
		return "", false, err
	}
	var d wire.MessageUser
	if json.Unmarshal(e.Data, &d) != nil || d.Origin == nil || d.Origin.BindingID != o.Binding.UID {
		// The web's, the command line's or another channel's message.
		return "", false, nil
	}
	for _, p := range o.peers(ctx) {
		if p.Chat == d.Origin.ChatID {
			return p.Chat, true, nil
		}
	}
	return "", false, nil
}

func (o *Outbound) peers(ctx context.Context) []store.Peer {
	peers, err := o.Store.Peers(ctx, o.Binding.UID)
	if err != nil {
		o.Log.Error(err, "the channel's people could not be read", "channel", o.Binding.UID)
	}
	return peers
}

// toOwners sends text to every owner's chat.
func (o *Outbound) toOwners(ctx context.Context, text string) (bool, error) {
	peers, err := o.Store.Peers(ctx, o.Binding.UID)
	if err != nil {
		return false, err
	}
	sent := false
	for _, p := range peers {
		if p.Role != store.PeerOwner {
			continue
		}
		s, err := o.sendTo(ctx, p.Chat, text)
		if err != nil {
			return sent, err
		}
		sent = sent || s
	}
	return sent, nil
}

// sendTo sends text to chat; a refusal for good (the person blocked the
// bot) drops it.
func (o *Outbound) sendTo(ctx context.Context, chat, text string) (bool, error) {
	err := o.Send.SendText(ctx, chat, text)
	if errors.Is(err, channels.ErrRefused) {
		o.Log.Info("the channel refused a message for good; it is dropped", "channel", o.Binding.UID, "reason", err.Error())
		return true, nil
	}
	return err == nil, err
}

// taskEnding is a task's end in a chat's words.
func taskEnding(e store.Event) string {
	switch e.Type {
	case protocol.EventTaskCompleted:
		var d protocol.TaskCompleted
		_ = json.Unmarshal(e.Data, &d)
		return "Task done: " + eventtext.Cut(d.Summary, 3000)
	default:
		var d protocol.TaskFailed
		_ = json.Unmarshal(e.Data, &d)
		return "Task failed: " + eventtext.Cut(d.Error, 3000)
	}
}
