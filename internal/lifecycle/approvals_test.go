package lifecycle

import (
	"testing"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func TestRequestedApprovalPhase(t *testing.T) {
	tests := map[string]struct {
		reason           string
		current          dotsv1.ApprovalPhase
		decided, expired bool
		want             dotsv1.ApprovalPhase
		write            bool
	}{
		"new":           {reason: "a request just made waits for a person", want: dotsv1.ApprovalPending, write: true},
		"new for ended": {reason: "made after its task ended: Expired at once, never seen Pending", expired: true, want: dotsv1.ApprovalExpired, write: true},
		"pending":       {reason: "Pending stays, written once", current: dotsv1.ApprovalPending},
		"task ended":    {reason: "its task ended without a decision: Expired", current: dotsv1.ApprovalPending, expired: true, want: dotsv1.ApprovalExpired, write: true},
		"decided":       {reason: "a decided Approval's phase is the Approval reconciler's", current: dotsv1.ApprovalPending, decided: true, expired: true},
		"expired stays": {reason: "an expired Approval stays expired", current: dotsv1.ApprovalExpired},
		"approved":      {reason: "an answered one is left alone", current: dotsv1.ApprovalApproved, decided: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, write := RequestedApprovalPhase(tc.current, tc.decided, tc.expired)
			if got != tc.want || write != tc.write {
				t.Errorf("%s\nRequestedApprovalPhase(%q, %t, %t) = %q, %t; want %q, %t", tc.reason, tc.current, tc.decided, tc.expired, got, write, tc.want, tc.write)
			}
		})
	}
}
