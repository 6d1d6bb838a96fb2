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
	// Channel is what carried the message: ChannelAPI, for which the log
	// holds no origin (ref 5.4), or a messaging channel's kind (ref 9.8),
	// whose message is logged with its origin and stored once by the
	// channel's own id.
	Channel string
	// BindingID, ChatID and ExternalID are a messaging channel's: the
	// Dot's link to it, the chat the answer goes back to, and the
	// channel's own id of the message. Empty for ChannelAPI.
	BindingID, ChatID, ExternalID string
}

// wire is the origin as the log holds it, nil for the Dots API.
func (o Origin) wire() (*wire.MessageOrigin, error) {
	if o.Channel == ChannelAPI {
		if o.BindingID != "" || o.ChatID != "" || o.ExternalID != "" {
			return nil, fmt.Errorf("a message of the Dots API has no channel binding, chat or channel id")
		}
		return nil, nil
	}
	if o.Channel == "" || o.BindingID == "" || o.ChatID == "" || o.ExternalID == "" {
		return nil, fmt.Errorf("a message from channel %q needs its binding, its chat and the channel's id of it (got %q, %q, %q)", o.Channel, o.BindingID, o.ChatID, o.ExternalID)
	}
	return &wire.MessageOrigin{Channel: o.Channel, BindingID: o.BindingID, ChatID: o.ChatID, ExternalID: o.ExternalID}, nil
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
	// Redelivered: a messaging channel gave this message before (same
	// binding, same channel id), and this is the first one, which the
	// Dot got; nothing was stored again.
	Redelivered bool
}

// PostMessage stores a person's message to dot, for every way a message
// arrives: the message.user event of the log and the user.message outbox
// row that carries the text to the guest, in one transaction, so both are
// stored or neither is. A message a person saw accepted is therefore never
// lost to a failed wake or a restart (ref 9.2), and the Dot is told exactly
// what the log says was said. The row's id follows from the event's
// (wire.MessageID), so the answer names a message the sender knows.
//
// A message of the Dots API is not idempotent: each call is a new message,
// and a call repeated after an unknown outcome posts the text again. A
// messaging channel's message is stored once by its origin: a redelivery,
// after a failure at any point or across a restart, is answered with the
// first message (Redelivered), so the Dot gets it once. Waking the Dot is not its
// part: the undelivered row is work that keeps the Dot awake
// (lifecycle.KeepsAwake), and the power controller starts its computer.
func (s *Store) PostMessage(ctx context.Context, dot Dot, text string, from Origin) (PostedMessage, error) {
	origin, err := from.wire()
	if err != nil {
		return PostedMessage{}, fmt.Errorf("a message of dot %s/%s: %w", dot.Namespace, dot.Name, err)
	}
	if strings.TrimSpace(text) == "" {
		return PostedMessage{}, fmt.Errorf("a message of dot %s/%s is empty: a message needs words", dot.Namespace, dot.Name)
	}
	if err := dot.valid(); err != nil {
		return PostedMessage{}, err
	}
	logged, err := json.Marshal(wire.MessageUser{Text: text, Origin: origin})
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
		if len(stored) == 0 && origin != nil {
			// The origin's index kept it out: the channel gave it before.
			posted, err = firstOf(ctx, tx, dot, origin)
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

// firstOf is the message a channel gave before with origin's binding and id.
func firstOf(ctx context.Context, tx pgx.Tx, dot Dot, origin *wire.MessageOrigin) (PostedMessage, error) {
	var p PostedMessage
	err := tx.QueryRow(ctx, `
SELECT id, created_at FROM events
WHERE dot_uid = $1 AND type = $2 AND data ? 'origin'
  AND data -> 'origin' ->> 'binding_id' = $3 AND data -> 'origin' ->> 'external_id' = $4`,
		dot.UID, wire.EventMessageUser, origin.BindingID, origin.ExternalID).Scan(&p.EventID, &p.CreatedAt)
	if err != nil {
		return PostedMessage{}, fmt.Errorf("the message %s of channel binding %s of dot %s/%s was neither stored nor found: %w", origin.ExternalID, origin.BindingID, dot.Namespace, dot.Name, err)
	}
	p.MessageID, p.Redelivered = MessageID(p.EventID), true
	return p, nil
}
