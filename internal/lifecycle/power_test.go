package lifecycle

import (
	"testing"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

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
