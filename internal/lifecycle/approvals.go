package lifecycle

import dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"

// RequestedApprovalPhase is the phase the control plane writes on an
// Approval the guest asked for (ref 5.4), from what the log tells of its
// request: its first phase, Pending, or Expired when its task ended (before
// the Approval was made or after) without a decision, so it is never seen
// waiting for nobody. write is false when the phase is not the control
// plane's to write: a decided Approval's phase is the Approval reconciler's,
// and an expired one stays expired.
func RequestedApprovalPhase(current dotsv1.ApprovalPhase, decided, expired bool) (phase dotsv1.ApprovalPhase, write bool) {
	switch {
	case decided || current == dotsv1.ApprovalExpired:
		return "", false // answered or moot already
	case expired:
		// A request whose task ended without a decision is moot.
		return dotsv1.ApprovalExpired, true
	case current == "":
		return dotsv1.ApprovalPending, true
	default:
		return "", false
	}
}
