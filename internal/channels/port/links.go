package port

import (
	"context"
	"sync"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// Linking hears how a new device's link goes: the codes to show, then its
// end. Adapter calls it; Links implements it per Channel.
type Linking interface {
	// Code is a new code to show as a QR (the one before is spent).
	Code(code string)
	// Linked: the phone linked the device of account.
	Linked(account Account)
	// Failed: linking ended without a link, for reason (no secret in it).
	Failed(reason string)
}

// Links holds the link codes on show, per Channel, in memory only: a code
// is a way into the account while it is shown, so it is never stored, logged
// or put in a status. A server route streams one Channel's (Watch).
type Links struct {
	mu sync.Mutex
	by map[string]*linkState
}

type linkState struct {
	code string
	// end is the last link's end frame, kept for a watcher that joins
	// after it (no secret: a number or a reason).
	end *wire.ChannelLinkFrame
	// changed is closed and replaced on every change, waking watchers.
	changed chan struct{}
}

// NewLinks makes an empty registry.
func NewLinks() *Links { return &Links{by: map[string]*linkState{}} }

func (l *Links) state(channel string) *linkState {
	s := l.by[channel]
	if s == nil {
		s = &linkState{changed: make(chan struct{})}
		l.by[channel] = s
	}
	return s
}

func (l *Links) update(channel string, f func(s *linkState)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(channel)
	f(s)
	close(s.changed)
	s.changed = make(chan struct{})
}

// Begin starts a new link of channel: a previous link's end is forgotten,
// so a watcher waits for the new codes.
func (l *Links) Begin(channel string) {
	l.update(channel, func(s *linkState) { s.code, s.end = "", nil })
}

// Forget drops everything of channel (the Channel was deleted); a watcher
// still streaming it ends.
func (l *Links) Forget(channel string) {
	l.update(channel, func(s *linkState) {
		s.code = ""
		s.end = &wire.ChannelLinkFrame{Failed: "the channel was deleted"}
	})
	l.mu.Lock()
	delete(l.by, channel)
	l.mu.Unlock()
}

// For is channel's Linking, for its Adapter.
func (l *Links) For(channel string) Linking { return channelLinks{l: l, channel: channel} }

type channelLinks struct {
	l       *Links
	channel string
}

func (c channelLinks) Code(code string) {
	c.l.update(c.channel, func(s *linkState) { s.code, s.end = code, nil })
}

func (c channelLinks) Linked(a Account) {
	c.l.update(c.channel, func(s *linkState) {
		s.code = ""
		s.end = &wire.ChannelLinkFrame{Linked: cmpOr(a.Name, a.ID)}
	})
}

func (c channelLinks) Failed(reason string) {
	c.l.update(c.channel, func(s *linkState) {
		s.code = ""
		s.end = &wire.ChannelLinkFrame{Failed: reason}
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Watch streams channel's link to send: the code on show now (a late
// watcher needs no wait), each new code, then the end frame (linked or
// failed), after which it returns nil. It returns ctx's error when ctx
// ends first, and send's error when send fails.
func (l *Links) Watch(ctx context.Context, channel string, send func(wire.ChannelLinkFrame) error) error {
	sent := ""
	// The state itself, not its name: Forget ends a watcher of the state
	// it removes, and a new link under the name starts a new one.
	l.mu.Lock()
	s := l.state(channel)
	l.mu.Unlock()
	for {
		l.mu.Lock()
		code, end, changed := s.code, s.end, s.changed
		l.mu.Unlock()
		if end != nil {
			return send(*end)
		}
		if code != "" && code != sent {
			if err := send(wire.ChannelLinkFrame{Code: code}); err != nil {
				return err
			}
			sent = code
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
