package channels

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Inbound is what a chat gave an adapter, as the adapter read it: the hub
// decides whether anyone hears it (a stranger, a group, an empty message
// are dropped before anything is written).
type Inbound struct {
	// Peer is the sender's stable id on the channel (a Telegram numeric
	// user id), never a name a person can change.
	Peer string
	// Label is how the sender calls themselves, for the people list only.
	Label string
	// Chat is the chat to answer in.
	Chat string
	// Private: a one-to-one chat with the bot; the hub serves no other.
	Private bool
	// ExternalID is the channel's own id of the message, unique per
	// binding (Telegram: bot id and update id), which stores it once.
	ExternalID string
	// Text is the message's text; HasText is false for a photo, a voice
	// note, a sticker (told "not supported yet" when the sender is paired).
	Text    string
	HasText bool
}

// Press is an approval button pressed in a chat.
type Press struct {
	Peer    string
	Chat    string
	Private bool
	// Data is the button's data as the chat gave it (ParseButtonData).
	Data string
}

// Sink is the hub as an adapter sees it. Each call returns once the hub
// has dealt with what it was given (stored, or dropped for good): only
// then does the adapter confirm it to the channel, so an error makes the
// adapter stop and the channel offer it again after the restart.
type Sink interface {
	// Connected says the link works (the channel answered the adapter's
	// first call), once per run.
	Connected()
	Inbound(ctx context.Context, in Inbound) error
	// Pressed returns the short notice the person gets for the press.
	Pressed(ctx context.Context, p Press) (notice string, err error)
}

// Account is a channel account as the person sees it (a bot's @name).
type Account struct {
	// ID is the channel's stable id of the account (a bot's user id).
	ID string
	// Name is its public name (a bot's username).
	Name string
}

// Errors an adapter reports, which the hub acts on.
var (
	// ErrNeedsRelink: the channel refuses the credentials for good (a
	// revoked token); nothing is retried until the person links again.
	ErrNeedsRelink = errors.New("the channel no longer accepts this link's credentials: link it again")
	// ErrAnotherPoller: another process takes this account's updates
	// (one bot serves one Dot).
	ErrAnotherPoller = errors.New("another program takes this bot's updates: one bot serves one Dot, so stop the other, or give this Dot a bot of its own")
	// ErrRefused: the channel refused a send for good (the person blocked
	// the bot, the chat is gone); the message is dropped, not retried.
	ErrRefused = errors.New("the channel refused the message for good")
	// ErrInvalidCredentials: checked before anything is stored.
	ErrInvalidCredentials = errors.New("the channel does not accept these credentials")
)

// RetryAfterError is the channel asking to wait before the next call.
type RetryAfterError struct{ After time.Duration }

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("the channel asks to wait %s before the next call", e.After)
}

// Scrub replaces every secret in s (a link's credentials, which a channel
// carries in its URLs) with "***": whatever an adapter or a library wrote,
// no stored status, event or log line holds one.
func Scrub(s string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "***")
		}
	}
	return s
}
