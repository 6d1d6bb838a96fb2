package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// ChannelAPI is the origin of a message posted through the Dots API: the web
// client, the command line and programs.
const ChannelAPI = "api"

// Origin says where a person's message came from (ref 5.4).
type Origin struct {
	// Channel is what carried the message. ChannelAPI is the one PostMessage
	// takes, and the log holds no origin for it (ref 5.4). A messaging
	// channel's message (ref 9.8) is logged with its origin and stored once
	// by the channel's own id, which the log does not hold, so PostMessage
	// refuses it rather than log a message that a redelivery would post
	// again.
	Channel string
}

// PostedMessage is a person's message as PostMessage stored it.
type PostedMessage struct {
	// EventID is the id of its message.user event in the log.
	EventID int64
	// MessageID is the id the guest receives it under, which the Dot's
	// answer names in in_reply_to (wire.MessageID of EventID).
	MessageID string
	// CreatedAt is when the log stored it.
	CreatedAt time.Time
}

// PostMessage stores a person's message to dot, for every way a message
// arrives: the message.user event of the log and the user.message outbox
// row that carries the text to the guest, in one transaction, so both are
// stored or neither is. A message a person saw accepted is therefore never
// lost to a failed wake or a restart (ref 9.2), and the Dot is told exactly
// what the log says was said. The row's id follows from the event's
// (wire.MessageID), so the answer names a message the sender knows.
//
// It is not idempotent: each call is a new message, and a call repeated
// after an unknown outcome posts the text again. Waking the Dot is not its
// part: the undelivered row is work that keeps the Dot awake
// (lifecycle.KeepsAwake), and the power controller starts its computer.
func (s *Store) PostMessage(ctx context.Context, dot Dot, text string, from Origin) (PostedMessage, error) {
	if from.Channel != ChannelAPI {
		return PostedMessage{}, fmt.Errorf("a message of dot %s/%s from %q: the log takes messages from the Dots API (%q) only", dot.Namespace, dot.Name, from.Channel, ChannelAPI)
	}
	if strings.TrimSpace(text) == "" {
		return PostedMessage{}, fmt.Errorf("a message of dot %s/%s is empty: a message needs words", dot.Namespace, dot.Name)
	}
	if err := dot.valid(); err != nil {
		return PostedMessage{}, err
	}
	logged, err := json.Marshal(wire.MessageUser{Text: text})
	if err != nil {
		return PostedMessage{}, err
	}
	inbound, err := json.Marshal(protocol.UserMessage{Text: text})
	if err != nil {
		return PostedMessage{}, err
	}
	var posted PostedMessage
	err = s.InTx(ctx, func(tx pgx.Tx) error {
		stored, err := AppendEventsTx(ctx, tx, Event{Dot: dot, Type: wire.EventMessageUser, Source: SourceHost, Data: logged})
		if err != nil {
			return err
		}
		if len(stored) != 1 {
			return fmt.Errorf("the message of dot %s/%s was not stored", dot.Namespace, dot.Name)
		}
		posted = PostedMessage{EventID: stored[0].ID, MessageID: MessageID(stored[0].ID), CreatedAt: stored[0].CreatedAt}
		// The row follows from the logged event: the same event gives the
		// same id (DESIGN.md 4).
		_, err = EnqueueTx(ctx, tx, Inbound{
			ID: posted.MessageID, Dot: dot, Type: protocol.InboundUserMessage, Data: inbound, TS: posted.CreatedAt,
		})
		return err
	})
	if err != nil {
		return PostedMessage{}, err
	}
	return posted, nil
}
