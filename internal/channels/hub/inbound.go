// Package hub is the messaging channel hub (ref 9.8): it serves each
// Channel of a Dot with its adapter and holds every policy the adapters do
// not. What is here so far is the way in: who may talk (pairing by a
// one-time code, by the channel's stable id, in a private chat; strangers,
// groups and empty messages dropped before anything is written), how much
// (the token bucket, the bound on a message), and a message's one write
// with its origin, so a redelivery finds the first.
package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// Binding is one Channel as the hub serves it: the Dot's link to one
// channel account.
type Binding struct {
	// UID is the Channel's uid, which its rows and its messages' origins
	// name.
	UID string
	// Kind is the channel's kind: telegram.
	Kind string
	// Dot is the Dot it talks to.
	Dot store.Dot
}

// Replier sends the hub's own words to a chat (a pairing's welcome, a
// refusal): the adapter's SendText.
type Replier interface {
	SendText(ctx context.Context, chat, text string) error
}

// Inbound is the hub's side of one binding's adapter for what people send
// (the Inbound half of channels.Sink; button presses come with approvals).
type Inbound struct {
	Binding Binding
	Store   *store.Store
	Reply   Replier
	// Bucket is the binding's token bucket (one per binding, kept across
	// the adapter's restarts).
	Bucket *channels.Bucket
	// Prompts read an answer in words (a channel without buttons); nil
	// reads none.
	Prompts *Prompts
	// OnPaired hears that a person paired.
	OnPaired func()
	Log      logr.Logger
	Now      func() time.Time
}

// The words the hub says in a chat.
const (
	saidPaired      = "Paired. You can talk to %s here."
	saidNotText     = "Only text is supported yet: write your message."
	saidTooLong     = "That message is too long (at most %d characters): split it and send it again."
	saidSlowDown    = "Too many messages at once: the Dot reads 20 a minute. Wait a moment; what you send now is not read."
	maxReplyAttempt = 10 * time.Second
)

func (h *Inbound) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Inbound deals with one message: dropped, pairing, or stored for the Dot.
// It returns an error only when the message could not be stored, so the
// adapter stops and the channel offers it again.
func (h *Inbound) Inbound(ctx context.Context, in channels.Inbound) error {
	// Only private chats are served: a group's message is dropped before
	// anything is read of it.
	if !in.Private || in.Peer == "" || in.Chat == "" {
		return nil
	}
	if code, ok := channels.StartCode(in.Text); ok {
		return h.pair(ctx, in, code)
	}
	peer, ok, err := h.Store.PeerOf(ctx, h.Binding.UID, in.Peer)
	if err != nil {
		return err
	}
	if !ok {
		// A stranger costs no row, no model call and no answer.
		return nil
	}
	if !in.HasText {
		h.reply(ctx, peer.Chat, saidNotText)
		return nil
	}
	text := strings.TrimSpace(in.Text)
	if text == "" {
		return nil
	}
	if n := utf8.RuneCountInString(text); n > channels.MaxInboundRunes {
		h.reply(ctx, in.Chat, fmt.Sprintf(saidTooLong, channels.MaxInboundRunes))
		return nil
	}
	if ok, tell := h.Bucket.Take(peer.ID, h.now()); !ok {
		if tell {
			h.reply(ctx, in.Chat, saidSlowDown)
		}
		return nil
	}
	if h.Prompts != nil {
		handled, notice, err := h.Prompts.Words(ctx, peer, text)
		if err != nil {
			return err
		}
		if handled {
			h.reply(ctx, in.Chat, notice)
			return nil
		}
	}
	_, err = h.Store.PostMessage(ctx, h.Binding.Dot, text, store.Origin{
		Channel: h.Binding.Kind, BindingID: h.Binding.UID, ChatID: in.Chat, ExternalID: in.ExternalID,
	})
	return err
}

// pair uses a code: a wrong, expired or used one gets no answer (the
// sender may be a stranger guessing), a good one pairs the sender as an
// owner of the binding with their chat, logs it, and welcomes them.
func (h *Inbound) pair(ctx context.Context, in channels.Inbound, code string) error {
	p, err := h.Store.Pair(ctx, channels.HashPairingCode(code), store.Peer{
		Binding: h.Binding.UID, DotUID: h.Binding.Dot.UID, ID: in.Peer, Chat: in.Chat, Role: store.PeerOwner, Label: in.Label,
	}, h.now())
	if errors.Is(err, store.ErrNoSuchPairingCode) {
		return nil
	}
	if err != nil {
		return err
	}
	data, _ := json.Marshal(wire.ChannelPeerPaired{Kind: h.Binding.Kind, PeerID: p.ID, Label: p.Label})
	if _, err := h.Store.AppendEvents(ctx, store.Event{Dot: h.Binding.Dot, Type: wire.EventChannelPeerPaired, Source: store.SourceHost, Data: data}); err != nil {
		// The pairing stands; the log misses its line.
		h.Log.Error(err, "the pairing is not in the Dot's log", "channel", h.Binding.UID)
	}
	welcome := fmt.Sprintf(saidPaired, h.Binding.Dot.Name)
	// The person pairing is told what the service reads (WhatsApp's risk is
	// the linking account's, told where it is linked).
	if h.Binding.Kind == "telegram" {
		welcome += " " + wire.ChannelWarnings["telegram"]
	}
	h.reply(ctx, in.Chat, welcome)
	if h.OnPaired != nil {
		h.OnPaired()
	}
	return nil
}

// reply says the hub's words, best effort: what they answer is dealt with
// whether or not they arrive.
func (h *Inbound) reply(ctx context.Context, chat, text string) {
	ctx, cancel := context.WithTimeout(ctx, maxReplyAttempt)
	defer cancel()
	if err := h.Reply.SendText(ctx, chat, text); err != nil {
		h.Log.V(1).Info("the hub's reply was not sent", "channel", h.Binding.UID, "err", err.Error())
	}
}
