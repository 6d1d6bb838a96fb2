package hub

import (
	"context"
	"slices"

	"github.com/invisible-dots/invisible-dots/internal/channels"
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
	New func(b Binding, l Link) (Adapter, error)
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
