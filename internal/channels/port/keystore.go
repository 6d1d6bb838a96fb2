package port

import (
	"context"
	"errors"
)

// KeyStore keeps a linked device's state for the server: the program holds
// it in memory only and sends every change here before it goes on. The
// server's implementation writes a Kubernetes Secret the Channel owns.
type KeyStore interface {
	// Load returns every key (none for a device not linked yet).
	Load(ctx context.Context) (Keys, error)
	// Save writes changes, in order and all together, and returns only
	// once they are durable; the program's write waits on it. A store
	// whose Channel is gone refuses with ErrChannelGone.
	Save(ctx context.Context, changes []KeyChange) error
}

// ErrChannelGone: the Channel, or its Dot, was deleted; a session still
// open must not write the device's keys back after the delete.
var ErrChannelGone = errors.New("the WhatsApp channel was deleted: its device's keys are no longer written")
