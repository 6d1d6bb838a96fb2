package lifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time { t := now.Add(d); return &t }

func TestNextTask(t *testing.T) {
	pending := func(name string, prio int32, age time.Duration) Task {
		return Task{Name: name, Phase: dotsv1.TaskPending, Priority: prio, Created: now.Add(-age)}
	}
	tests := map[string]struct {
		reason string
		tasks  []Task
		want   Dispatch
	}{
		"none":     {reason: "no task, nothing to send", tasks: nil, want: Dispatch{}},
		"priority": {reason: "higher priority first", tasks: []Task{pending("a", 0, time.Hour), pending("b", 5, time.Minute)}, want: Dispatch{Next: "b"}},
		"age":      {reason: "same priority: the older", tasks: []Task{pending("a", 1, time.Minute), pending("b", 1, time.Hour)}, want: Dispatch{Next: "b"}},
		"name": {reason: "same priority and age: by name, the same every time",
			tasks: []Task{pending("z", 1, time.Minute), pending("m", 1, time.Minute)}, want: Dispatch{Next: "m"}},
		"one active": {reason: "a RUNNING task blocks the next",
			tasks: []Task{{Name: "r", Phase: dotsv1.TaskRunning}, pending("a", 9, time.Hour)}, want: Dispatch{Blocked: "r"}},
		"waiting approval blocks": {reason: "WAITING_APPROVAL is active too",
			tasks: []Task{{Name: "w", Phase: dotsv1.TaskWaitingApproval}, pending("a", 0, 0)}, want: Dispatch{Blocked: "w"}},
		"scheduled later": {reason: "not before scheduledAt; the wait is to the earliest",
			tasks: []Task{{Name: "s", Phase: dotsv1.TaskPending, ScheduledAt: at(10 * time.Minute)}, {Name: "t", Phase: dotsv1.TaskPending, ScheduledAt: at(5 * time.Minute)}},
			want:  Dispatch{Wait: 5 * time.Minute}},
		"scheduled now": {reason: "a scheduledAt that came is due",
			tasks: []Task{{Name: "s", Phase: dotsv1.TaskPending, ScheduledAt: at(-time.Second)}}, want: Dispatch{Next: "s"}},
		"ended ignored": {reason: "COMPLETED, FAILED and CANCELLED tasks take no part",
			tasks: []Task{{Name: "c", Phase: dotsv1.TaskCompleted}, {Name: "f", Phase: dotsv1.TaskFailed}, {Name: "x", Phase: dotsv1.TaskCancelled}}, want: Dispatch{}},
		"cancel requested": {reason: "a PENDING task a person cancelled is not sent",
			tasks: []Task{{Name: "a", Phase: dotsv1.TaskPending, CancelRequested: true}, pending("b", 0, 0)}, want: Dispatch{Next: "b"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, NextTask(tc.tasks, now)); diff != "" {
				t.Errorf("%s\nNextTask -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
