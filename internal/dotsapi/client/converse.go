package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// ConverseOptions shape a Converse.
type ConverseOptions struct {
	// Wait is how long to wait for the answer once the message is
	// accepted; 0 waits until ctx ends. Posting the message is not part of
	// it.
	Wait time.Duration
	// Types are the types of the Dot's events that OnEvent is given while
	// the answer is awaited (its tool calls, its questions); the answer
	// itself is never given to it.
	Types []string
	// OnEvent is given each event of Types the Dot's log holds after the
	// message, in order, until the answer. Converse waits for it to
	// return, with the stream held (a question asked of a person is
	// answered before the conversation goes on). An error it returns ends
	// the Converse with that error. Nil gives nothing.
	OnEvent func(ctx context.Context, e wire.StreamEvent) error
}

// ErrNoAnswer is Converse's error when the Dot did not answer in time.
var ErrNoAnswer = errors.New("no answer")

// Exchange is a message said to a Dot and what the Dot answered.
type Exchange struct {
	// Accepted is the server's answer to the message.
	Accepted wire.MessageAccepted
	// MessageID is the message's id (wire.MessageID), which the answer
	// names in in_reply_to.
	MessageID string
	// Answer is the Dot's answer; empty when Converse failed.
	Answer protocol.MessageAssistant
}

// Converse says text to the Dot namespace/dot's chat and follows the Dot's
// live stream from the message on until its answer: the first
// message.assistant whose in_reply_to is the message's id, or that names
// no message: an answer that names none came after the message, and is
// shown rather than waited past. Answers to other messages are passed over.
//
// The Exchange holds what is known even on an error: a message accepted
// stays queued, and the Dot answers it when it can. When no answer came
// before the wait ended (o.Wait, or ctx's deadline), the error wraps
// ErrNoAnswer; an error of o.OnEvent is returned as it is.
func (c *Client) Converse(ctx context.Context, namespace, dot, text string, o ConverseOptions) (Exchange, error) {
	accepted, err := c.PostMessage(ctx, namespace, dot, text)
	if err != nil {
		return Exchange{}, fmt.Errorf("send the message: %w", err)
	}
	x := Exchange{Accepted: accepted, MessageID: wire.MessageID(accepted.EventID)}
	if o.Wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Wait)
		defer cancel()
	}
	types := slices.Clone(o.Types)
	if !slices.Contains(types, protocol.EventMessageAssistant) {
		types = append(types, protocol.EventMessageAssistant)
	}
	// Cancelled on return, which ends the stream whatever ended the wait.
	follow, stop := context.WithCancel(ctx)
	defer stop()
	after := accepted.EventID
	events, errc := c.Stream(follow, StreamOptions{Namespace: namespace, Dot: dot, Types: types, After: &after})
	for e := range events {
		if e.Type == protocol.EventMessageAssistant {
			var d protocol.MessageAssistant
			if json.Unmarshal(e.Data, &d) == nil && (d.InReplyTo == nil || *d.InReplyTo == x.MessageID) {
				x.Answer = d
				return x, nil
			}
			if !slices.Contains(o.Types, protocol.EventMessageAssistant) {
				continue
			}
		}
		if o.OnEvent != nil {
			if err := o.OnEvent(ctx, e); err != nil {
				return x, err
			}
		}
	}
	if err := <-errc; err != nil {
		return x, err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return x, fmt.Errorf("%w to message %s: %w", ErrNoAnswer, x.MessageID, ctx.Err())
	}
	return x, ctx.Err()
}
