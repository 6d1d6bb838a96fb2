package controllers

import (
	"cmp"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// phaseFacts are what a Dot's phase is computed from: its Computer (the
// status its host agent writes), the READY procedure (the conditions the
// guest link writes), and its work (currentTask and pendingApprovals,
// which the activity status reconciler writes from the Dot's log).
type phaseFacts struct {
	// conflict: a Computer of the Dot's name exists that the Dot does not
	// own.
	conflict bool
	// computer is the Dot's Computer, nil when there is none (yet).
	computer      *dotsv1.Computer
	computerReady bool
	guestReady    bool
	currentTask   string
	// pendingApprovals counts the approvals that wait for a person.
	pendingApprovals int32
	// last is the phase the Dot was last seen in.
	last dotsv1.DotPhase
}

// dotPhase is the Dot's phase (ref 9.3): the first matching row wins. It is
// the one place the phase is computed, and the Dot reconciler's
// updateStatus its one writer. READY needs both the Computer and the guest:
// a Computer whose dot-agentd answers is not yet a Dot that can work.
func dotPhase(f phaseFacts) dotsv1.DotPhase {
	c := f.computer
	running := c != nil && c.Status.State == dotsv1.ComputerRunning && f.computerReady && f.guestReady
	switch {
	case f.conflict:
		return dotsv1.DotError
	case c == nil:
		return dotsv1.DotCreating
	case isUnknown(c.Status.Conditions, dotsv1.ReadyCondition):
		// Its host is out of reach: the Dot was last seen as it is.
		return cmp.Or(f.last, dotsv1.DotCreating)
	case c.Status.State == dotsv1.ComputerError:
		return dotsv1.DotError
	case c.Status.StartFailure != nil && c.Status.StartFailure.ConsecutiveFailCount > 0 && c.Status.State != dotsv1.ComputerRunning:
		return dotsv1.DotError
	case running && f.pendingApprovals > 0:
		return dotsv1.DotWaitingApproval
	case running && f.currentTask != "":
		return dotsv1.DotRunning
	case running:
		return dotsv1.DotReady
	case c.Status.State == dotsv1.ComputerStopped:
		// A Dot whose computer sleeps is IDLE (ref 9.3): it wakes for work.
		return dotsv1.DotIdle
	default:
		return dotsv1.DotCreating
	}
}
