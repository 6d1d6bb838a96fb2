package port_test

import (
	"context"

	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// The hub drives the adapter as any other, and finds the approvals' words
// and edits by these methods. (Here, in a test: port's own build must stay
// free of the hub's database, which the WhatsApp program would compile.)
var (
	_ hub.Adapter = (*port.Adapter)(nil)
	_ interface {
		SendApproval(ctx context.Context, chat, text, approvalID string) (string, error)
		EditApproval(ctx context.Context, chat, ref, text string) error
		ApprovalsByText() bool
	} = (*port.Adapter)(nil)
)
