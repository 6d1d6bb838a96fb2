package hub

import (
	"context"
	"net"
	"slices"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// How a kind of channel is linked.
const (
	// LinkedByToken: the person gives credentials (a bot's token), checked
	// before they are stored.
	LinkedByToken = "token"
	// LinkedByCode: the person scans a code on a phone (WhatsApp); no
	// credentials are given.
	LinkedByCode = "code"
)

// Kind is a channel type this server runs.
type Kind struct {
	// Type is the Channel's spec.type.
	Type     string
	LinkedBy string
	// Check asks the service who the credentials are before anything is
	// stored: channels.ErrInvalidCredentials when it refuses them, another
	// error (never holding them) when it cannot be asked. Nil for a kind
	// linked by a code.
	Check func(ctx context.Context, token string) (channels.Account, error)
	// New makes a fresh adapter for one start of a binding.
	New func(b Binding, l Link, d Device) (Adapter, error)
}

// Device is what the hub gives the adapter of a kind linked by a code
// (WhatsApp): where its device's keys are kept, and how it tells the
// account it is linked to.
type Device struct {
	// Keys keeps the device's keys (the Channel's Secret); nil for a kind
	// linked by a token.
	Keys port.KeyStore
	// Linking hears the codes to show and the link's end.
	Linking port.Linking
	// OnAccount tells the hub the account the device is linked to.
	OnAccount func(channels.Account)
}

// Link is what a binding's adapter is made from.
type Link struct {
	// Token is the credentials of a kind linked by a token.
	Token string
	// Account is the account the Channel's status holds.
	Account channels.Account
}

// Kinds are the channel types a server runs, by Type.
type Kinds map[string]Kind

// Types lists them, sorted.
func (k Kinds) Types() []string {
	out := make([]string, 0, len(k))
	for t := range k {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// WhatsAppOff says why a server does not run WhatsApp, and how to turn it
// on: the Dots API's answer and a Channel's status alike.
const WhatsAppOff = "WhatsApp is off on this server: it is an opt-in, separate program (build it with `make whatsapp`, put invisible-dots-whatsapp next to invisible-dots) and the server must be started with INVISIBLE_DOTS_WHATSAPP=1"

// WhatsApp is WhatsApp as the hub runs it: linked by a code, through the
// WhatsApp program's socket (dial: port.Program.Dial), a separate, opt-in
// program (internal/channels/whatsapp).
func WhatsApp(dial func(ctx context.Context) (net.Conn, error), log logr.Logger) Kind {
	return Kind{
		Type:     "whatsapp",
		LinkedBy: LinkedByCode,
		New: func(b Binding, _ Link, d Device) (Adapter, error) {
			return port.New(port.Config{
				Dial: dial, Keys: d.Keys, Linking: d.Linking, OnAccount: d.OnAccount,
				Log: log.WithValues("channel", b.UID),
			}), nil
		},
	}
}
