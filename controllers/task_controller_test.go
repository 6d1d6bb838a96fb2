package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// TestDotComesOrGoes: the Task reconciler hears of a Dot's creation and
// deletion, which change its Tasks' binding, and not of the status writes
// every turn makes, which would wake every Task the Dot ever had.
func TestDotComesOrGoes(t *testing.T) {
	dot := func(mod func(*dotsv1.Dot)) *dotsv1.Dot {
		d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d"}}
		if mod != nil {
			mod(d)
		}
		return d
	}
	thinking := dot(func(d *dotsv1.Dot) { d.Status.AgentState = "THINKING" })
	deleted := dot(func(d *dotsv1.Dot) { d.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} })
	for name, tc := range map[string]struct {
		got, want bool
	}{
		"made":                {dotComesOrGoes.Create(event.CreateEvent{Object: dot(nil)}), true},
		"gone":                {dotComesOrGoes.Delete(event.DeleteEvent{Object: dot(nil)}), true},
		"marked deleted":      {dotComesOrGoes.Update(event.UpdateEvent{ObjectOld: dot(nil), ObjectNew: deleted}), true},
		"its status moved":    {dotComesOrGoes.Update(event.UpdateEvent{ObjectOld: dot(nil), ObjectNew: thinking}), false},
		"a deleted one moved": {dotComesOrGoes.Update(event.UpdateEvent{ObjectOld: deleted, ObjectNew: deleted}), false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: passed %v; want %v", name, tc.got, tc.want)
		}
	}
}
