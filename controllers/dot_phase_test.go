package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func TestDotPhase(t *testing.T) {
	computer := func(state dotsv1.ComputerState, ready metav1.ConditionStatus, failures int32) *dotsv1.Computer {
		c := &dotsv1.Computer{Status: dotsv1.ComputerStatus{State: state,
			Conditions: []metav1.Condition{{Type: dotsv1.ReadyCondition, Status: ready, Reason: "r"}}}}
		if failures > 0 {
			c.Status.StartFailure = &dotsv1.StartFailure{ConsecutiveFailCount: failures}
		}
		return c
	}
	running := computer(dotsv1.ComputerRunning, metav1.ConditionTrue, 0)
	tests := map[string]struct {
		reason string
		facts  phaseFacts
		want   dotsv1.DotPhase
	}{
		"conflict":    {"a Computer the Dot does not own is an error", phaseFacts{conflict: true, computer: running}, dotsv1.DotError},
		"no computer": {"no Computer yet: creating", phaseFacts{}, dotsv1.DotCreating},
		"host unreachable": {"a host out of reach leaves the phase as last seen",
			phaseFacts{computer: computer(dotsv1.ComputerRunning, metav1.ConditionUnknown, 0), last: dotsv1.DotRunning}, dotsv1.DotRunning},
		"host unreachable at first": {"with nothing seen before, creating",
			phaseFacts{computer: computer(dotsv1.ComputerRunning, metav1.ConditionUnknown, 0)}, dotsv1.DotCreating},
		"computer error": {"a Computer in ERROR", phaseFacts{computer: computer(dotsv1.ComputerError, metav1.ConditionFalse, 0)}, dotsv1.DotError},
		"start failures": {"a Computer that failed to start and does not run",
			phaseFacts{computer: computer(dotsv1.ComputerStopped, metav1.ConditionFalse, 1)}, dotsv1.DotError},
		"waiting approval": {"ready, with an approval waiting (before a current task)",
			phaseFacts{computer: running, computerReady: true, guestReady: true, pendingApprovals: 1, currentTask: "t"}, dotsv1.DotWaitingApproval},
		"running": {"ready, with a current task", phaseFacts{computer: running, computerReady: true, guestReady: true, currentTask: "t"}, dotsv1.DotRunning},
		"ready":   {"ready, nothing to do", phaseFacts{computer: running, computerReady: true, guestReady: true}, dotsv1.DotReady},
		"guest not ready": {"the guest has not completed READY: work does not count yet",
			phaseFacts{computer: running, computerReady: true, currentTask: "t", pendingApprovals: 1}, dotsv1.DotCreating},
		"asleep":   {"a stopped computer is IDLE", phaseFacts{computer: computer(dotsv1.ComputerStopped, metav1.ConditionFalse, 0)}, dotsv1.DotIdle},
		"starting": {"any other state is creating", phaseFacts{computer: computer(dotsv1.ComputerStarting, metav1.ConditionFalse, 0)}, dotsv1.DotCreating},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := dotPhase(tc.facts); got != tc.want {
				t.Errorf("%s\ndotPhase(%+v) = %s, want %s", tc.reason, tc.facts, got, tc.want)
			}
		})
	}
}
