package lifecycle

import (
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Kind is what an outbox row carries: the type of the inbound event the
// guest receives, as guest/protocol names it.
type Kind string

const (
	KindTask     Kind = protocol.InboundTaskCreated
	KindMessage  Kind = protocol.InboundUserMessage
	KindDecision Kind = protocol.InboundApprovalReceived
	KindSystem   Kind = protocol.InboundSystemEvent
)

// Outcome is how one send to the guest ended.
type Outcome int

const (
	// Delivered: the guest answered 202.
	Delivered Outcome = iota
	// Unknown: a timeout or a reset connection: it may have arrived.
	Unknown
	// NotListening: nothing took the connection (a known failure).
	NotListening
	// Refused: the guest answered and refused the event (a known failure).
	Refused
)

// MaxTaskFailures is how many known failures give a task up.
const MaxTaskFailures = 3

// RowAction is what a send's outcome does to its row.
type RowAction string

const (
	// MarkDelivered: done.
	MarkDelivered RowAction = "MarkDelivered"
	// Resend: send again later with the same id, not counted (the guest
	// ignores an id it has).
	Resend RowAction = "Resend"
	// CountFailure: a known failure, counted; sent again at RetryAfter.
	CountFailure RowAction = "CountFailure"
	// GiveUpTask: the task goes FAILED (logged as task.failed) and its row
	// is dropped.
	GiveUpTask RowAction = "GiveUpTask"
	// WaitForReady: a message or a decision is never given up; it waits
	// for the next READY, which sends the Dot's rows again.
	WaitForReady RowAction = "WaitForReady"
)

// Delivery is the deliverer's rule for one row after one send (ref 9.2).
// failures is how many known failures the row had before this send. Every
// answer but MarkDelivered stops the Dot's sending for now, so nothing
// overtakes the row.
type Delivery struct {
	Action RowAction
	// RetryAfter is when to send again (CountFailure, Resend).
	RetryAfter time.Duration
}

// retryBackoff is the wait after the n-th known failure.
func retryBackoff(n int) time.Duration {
	d := time.Duration(n) * 5 * time.Second
	return min(d, time.Minute)
}

// AfterSend applies the rule.
func AfterSend(kind Kind, outcome Outcome, failures int) Delivery {
	switch outcome {
	case Delivered:
		return Delivery{Action: MarkDelivered}
	case Unknown:
		return Delivery{Action: Resend, RetryAfter: time.Second}
	}
	n := failures + 1
	if kind == KindTask && (outcome == Refused || n >= MaxTaskFailures) {
		return Delivery{Action: GiveUpTask}
	}
	if kind != KindTask && outcome == Refused {
		return Delivery{Action: WaitForReady}
	}
	return Delivery{Action: CountFailure, RetryAfter: retryBackoff(n)}
}
