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

func TestDecide(t *testing.T) {
	base := Facts{Strategy: dotsv1.RunOnDemand, State: dotsv1.ComputerRunning, Phase: dotsv1.DotReady, AgentState: "IDLE",
		LastActivity: now.Add(-20 * time.Minute), IdleTimeout: 15 * time.Minute, Now: now}
	with := func(f func(*Facts)) Facts { c := base; f(&c); return c }
	tests := map[string]struct {
		reason string
		facts  Facts
		want   Action
		after  time.Duration
	}{
		"idle sleeps": {reason: "IDLE, no work, nothing for longer than idleTimeout", facts: base, want: Sleep},
		"not yet": {reason: "idle for 10 of 15 minutes: look again in 5",
			facts: with(func(f *Facts) { f.LastActivity = now.Add(-10 * time.Minute) }), after: 5 * time.Minute},
		"never": {reason: "idleTimeout 0 never sleeps", facts: with(func(f *Facts) { f.IdleTimeout = 0 })},
		"not ready": {reason: "a Dot not READY yet (its engine has not reported) is not put to sleep",
			facts: with(func(f *Facts) { f.Phase = dotsv1.DotCreating }), after: 15 * time.Minute},
		"always":      {reason: "Always never sleeps", facts: with(func(f *Facts) { f.Strategy = dotsv1.RunAlways })},
		"thinking":    {reason: "an engine that is not IDLE keeps it up", facts: with(func(f *Facts) { f.AgentState = "THINKING" }), after: 15 * time.Minute},
		"due task":    {reason: "a due task keeps it up", facts: with(func(f *Facts) { f.Work.DueTask = true }), after: 15 * time.Minute},
		"active task": {reason: "a running task keeps it up", facts: with(func(f *Facts) { f.Work.ActiveTask = true }), after: 15 * time.Minute},
		"outbox": {reason: "something undelivered keeps it up; its delivery is not logged, so it is looked at again an idleTimeout later",
			facts: with(func(f *Facts) { f.Work.Undelivered = 1 }), after: 15 * time.Minute},
		"automation soon": {reason: "an automation due within the lead keeps it up",
			facts: with(func(f *Facts) { f.Work.NextAutomation = at(time.Minute) }), after: 15 * time.Minute},
		"automation later": {reason: "an automation due after the lead does not",
			facts: with(func(f *Facts) { f.Work.NextAutomation = at(time.Hour) }), want: Sleep},

		"asleep with a message": {reason: "work wakes a sleeping computer",
			facts: with(func(f *Facts) { f.State, f.StopReason, f.Work.Undelivered = dotsv1.ComputerStopped, dotsv1.StopIdle, 1 }), want: Wake},
		"halted with a task": {reason: "a person's stop does not keep a person's task waiting",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Strategy, f.Work.DueTask = dotsv1.ComputerStopped, dotsv1.StopUser, dotsv1.RunHalted, true
			}), want: Wake},
		"halted with an automation": {reason: "a person's stop pauses the automations",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Strategy, f.Work.NextAutomation = dotsv1.ComputerStopped, dotsv1.StopUser, dotsv1.RunHalted, at(-time.Minute)
			})},
		"asleep, automation due": {reason: "a sleeping computer starts for an automation within the lead",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Work.NextAutomation = dotsv1.ComputerStopped, dotsv1.StopIdle, at(time.Minute)
			}), want: Wake},
		"asleep, automation missed": {reason: "a past automation counts too",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Work.NextAutomation = dotsv1.ComputerStopped, dotsv1.StopIdle, at(-time.Hour)
			}), want: Wake},
		"asleep, automation later": {reason: "an automation in an hour: look again 90 s before it",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Work.NextAutomation = dotsv1.ComputerStopped, dotsv1.StopIdle, at(time.Hour)
			}),
			after: time.Hour - DefaultWakeLead},
		"exited with work": {reason: "a VM that exited by itself with work starts again at once",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Work.ActiveTask = dotsv1.ComputerStopped, dotsv1.StopExited, true
			}), want: Wake},
		"error not woken for automations": {reason: "a Dot in ERROR is not started for its automations",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Phase, f.Work.NextAutomation = dotsv1.ComputerStopped, dotsv1.StopIdle, dotsv1.DotError, at(0)
			})},
		"starting": {reason: "nothing is decided while the computer starts or stops",
			facts: with(func(f *Facts) { f.State = dotsv1.ComputerStarting })},
		"going to sleep, a message arrives": {reason: "an idle stop is called off when work arrived meanwhile (ref 9.5)",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Work.Undelivered = dotsv1.ComputerStopping, dotsv1.StopIdle, 1
			}), want: Wake},
		"going to sleep, no work": {reason: "an idle stop with no work goes on",
			facts: with(func(f *Facts) { f.State, f.StopReason = dotsv1.ComputerStopping, dotsv1.StopIdle })},
		"person's stop, a message arrives": {reason: "a person's stop is not called off; the message starts the computer once it is down",
			facts: with(func(f *Facts) {
				f.State, f.StopReason, f.Work.Undelivered = dotsv1.ComputerStopping, dotsv1.StopUser, 1
			})},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Decide(tc.facts)
			if got.Action != tc.want || got.After != tc.after {
				t.Errorf("%s\nDecide = %+v; want action %q, after %v", tc.reason, got, tc.want, tc.after)
			}
		})
	}
}

func TestAfterSend(t *testing.T) {
	tests := map[string]struct {
		reason   string
		kind     Kind
		outcome  Outcome
		failures int
		want     RowAction
	}{
		"delivered":          {"a 202 is delivered", KindTask, Delivered, 0, MarkDelivered},
		"unknown resent":     {"a timeout may have arrived: the same id again, not counted", KindTask, Unknown, 2, Resend},
		"task not listening": {"a known failure of a task is counted", KindTask, NotListening, 0, CountFailure},
		"task third failure": {"the third known failure gives the task up", KindTask, NotListening, 2, GiveUpTask},
		"task refused":       {"one refusal gives a task up", KindTask, Refused, 0, GiveUpTask},
		"message failures":   {"a message is never given up, however often it fails", KindMessage, NotListening, 10, CountFailure},
		"message refused":    {"a refused message waits for the next READY", KindMessage, Refused, 0, WaitForReady},
		"decision refused":   {"a decision is never given up either", KindDecision, Refused, 5, WaitForReady},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := AfterSend(tc.kind, tc.outcome, tc.failures); got.Action != tc.want {
				t.Errorf("%s\nAfterSend(%s, %d, %d) = %+v; want %s", tc.reason, tc.kind, tc.outcome, tc.failures, got, tc.want)
			}
		})
	}
}
