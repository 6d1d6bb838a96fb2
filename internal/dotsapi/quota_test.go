package dotsapi

import (
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

func TestHeldFrom(t *testing.T) {
	row := func(typ string) store.Inbound { return store.Inbound{Type: typ} }
	tests := map[string]struct {
		reason string
		rows   []store.Inbound
		want   int
	}{
		"Nothing":          {reason: "an empty outbox", want: 0},
		"DecisionsGo":      {reason: "an approval's answer and a cancel reach the running work", rows: []store.Inbound{row(protocol.InboundApprovalReceived), row(protocol.InboundSystemEvent)}, want: 2},
		"MessageHeld":      {reason: "a person's message is new work: held", rows: []store.Inbound{row(protocol.InboundUserMessage), row(protocol.InboundApprovalReceived)}, want: 0},
		"NothingOvertakes": {reason: "rows after held work wait too, in order", rows: []store.Inbound{row(protocol.InboundApprovalReceived), row(protocol.InboundTaskCreated), row(protocol.InboundSystemEvent)}, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := heldFrom(tc.rows); got != tc.want {
				t.Errorf("%s\nheldFrom(%v) = %d, want %d", tc.reason, tc.rows, got, tc.want)
			}
		})
	}
}
