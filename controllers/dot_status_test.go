package controllers

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// TestDotReadyNeedsTheGuest: a Dot is READY when its Computer is Ready and
// the READY procedure's three steps hold (ref 9.3), not on dot-agentd's
// health alone; otherwise it is CREATING and Ready says what it waits for.
func TestDotReadyNeedsTheGuest(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: "r", Message: msg}
	}
	allTrue := []metav1.Condition{
		cond(dotsv1.KeyPushedCondition, metav1.ConditionTrue, "pushed"),
		cond(dotsv1.ConfigAppliedCondition, metav1.ConditionTrue, "generation 1"),
		cond(dotsv1.AgentReadyCondition, metav1.ConditionTrue, "ready"),
	}
	tests := map[string]struct {
		reason        string
		computerReady bool
		guest         []metav1.Condition
		wantPhase     dotsv1.DotPhase
		wantReady     metav1.ConditionStatus
		wantMessage   string
	}{
		"all hold": {"the computer runs and the three steps hold", true, allTrue, dotsv1.DotReady, metav1.ConditionTrue, "engine is ready"},
		"agentd only": {"dot-agentd answering is not enough: the guest link has not reported", true, nil,
			dotsv1.DotCreating, metav1.ConditionFalse, "waiting for KeyPushed (not reported yet"},
		"no key": {"the first step that does not hold is named with its message", true, []metav1.Condition{
			cond(dotsv1.KeyPushedCondition, metav1.ConditionFalse, "no OpenRouter key is stored: run \"invisible-dots secret openrouter\""),
			cond(dotsv1.ConfigAppliedCondition, metav1.ConditionFalse, "waits"),
			cond(dotsv1.AgentReadyCondition, metav1.ConditionFalse, "waits"),
		}, dotsv1.DotCreating, metav1.ConditionFalse, "waiting for KeyPushed (no OpenRouter key is stored: run \"invisible-dots secret openrouter\")"},
		"engine starting": {"key and config in, the engine not ready yet", true, []metav1.Condition{
			allTrue[0], allTrue[1], cond(dotsv1.AgentReadyCondition, metav1.ConditionFalse, "the engine says \"starting\""),
		}, dotsv1.DotCreating, metav1.ConditionFalse, "waiting for AgentReady"},
		"computer not ready": {"stale True steps of an earlier boot do not make a Dot READY whose computer is not", false, allTrue,
			dotsv1.DotCreating, metav1.ConditionFalse, "QEMU runs"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dot := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default", Generation: 1},
				Status: dotsv1.DotStatus{Conditions: append([]metav1.Condition(nil), tc.guest...)}}
			ready := metav1.ConditionFalse
			if tc.computerReady {
				ready = metav1.ConditionTrue
			}
			c := &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default"},
				Status: dotsv1.ComputerStatus{State: dotsv1.ComputerRunning,
					Conditions: []metav1.Condition{{Type: dotsv1.ReadyCondition, Status: ready, Reason: "x", Message: "QEMU runs"}}}}
			r := &DotReconciler{Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))}
			r.updateStatus(&dotScope{dot: dot, computer: c}, true)
			if dot.Status.Phase != tc.wantPhase {
				t.Errorf("%s\nphase %s, want %s", tc.reason, dot.Status.Phase, tc.wantPhase)
			}
			got := meta.FindStatusCondition(dot.Status.Conditions, dotsv1.ReadyCondition)
			if got == nil || got.Status != tc.wantReady || !strings.Contains(got.Message, tc.wantMessage) {
				t.Errorf("%s\nReady = %+v, want %s with a message containing %q", tc.reason, got, tc.wantReady, tc.wantMessage)
			}
		})
	}
}
