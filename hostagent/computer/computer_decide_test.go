package computer

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
)

func TestDecideRun(t *testing.T) {
	const (
		onDemand = dotsv1.RunOnDemand
		always   = dotsv1.RunAlways
		halted   = dotsv1.RunHalted
	)
	tests := map[string]struct {
		reason string
		in     runInput
		want   runDecision
	}{
		"OnDemandCreate": {
			reason: "OnDemand starts the VM at create (no state, no stop reason yet)",
			in:     runInput{Strategy: onDemand, Observed: driver.Stopped},
			want:   runDecision{Action: actStart},
		},
		"GatedNotStartedAtCreate": {
			reason: "a start gate (the namespace's active-Dots cap) holds a new VM stopped",
			in:     runInput{Strategy: onDemand, Observed: driver.Stopped, Gated: true},
			want:   runDecision{},
		},
		"GatedStartRequestWaits": {
			reason: "a start request on a gated VM waits, unhandled, for the gate to go",
			in:     runInput{Strategy: onDemand, Observed: driver.Stopped, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopIdle, StartRequested: true, Gated: true},
			want:   runDecision{StopReason: dotsv1.StopIdle},
		},
		"GatedAlwaysNotStarted": {
			reason: "a gate holds even an Always VM that is down",
			in:     runInput{Strategy: dotsv1.RunAlways, Observed: driver.Stopped, Gated: true},
			want:   runDecision{},
		},
		"GatedRunningKeepsRunning": {
			reason: "a gate holds starts only: a running VM keeps running (a lowered cap stops nothing)",
			in:     runInput{Strategy: onDemand, Observed: driver.Running, PrevState: dotsv1.ComputerRunning, Gated: true},
			want:   runDecision{},
		},
		"EmptyStrategyIsOnDemand": {
			reason: "an empty strategy (before defaulting) behaves as OnDemand",
			in:     runInput{Observed: driver.Stopped},
			want:   runDecision{Action: actStart},
		},
		"OnDemandRunningLeftAlone": {
			reason: "a running OnDemand VM is left running; sleeping is the idle logic's",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerRunning, Observed: driver.Running},
			want:   runDecision{},
		},
		"OnDemandIdleStaysAsleep": {
			reason: "a VM asleep for idle is not woken by the run strategy",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopIdle, Observed: driver.Stopped},
			want:   runDecision{StopReason: dotsv1.StopIdle},
		},
		"OnDemandExitedUnasked": {
			reason: "an OnDemand VM that exited unasked is recorded exited and stays stopped",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerRunning, Observed: driver.Stopped, Exited: true},
			want:   runDecision{StopReason: dotsv1.StopExited, ExitedUnasked: true},
		},
		"OnDemandExitedAlreadyRecorded": {
			reason: "the same exit seen again (record still there) is not a new exit",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopExited, Observed: driver.Stopped, Exited: true},
			want:   runDecision{StopReason: dotsv1.StopExited},
		},
		"OnDemandStartRequested": {
			reason: "a start request wakes a sleeping OnDemand VM once",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopExited, Observed: driver.Stopped, StartRequested: true},
			want:   runDecision{Action: actStart, StopReason: dotsv1.StopExited, StartHandled: true},
		},
		"OnDemandAfterHalted": {
			reason: "the person lifted Halted (strategy back to OnDemand): start",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopUser, Observed: driver.Stopped},
			want:   runDecision{Action: actStart, StopReason: dotsv1.StopUser},
		},
		"OnDemandStartingCrashCounts": {
			reason: "QEMU gone before the guest answered is one more start failure",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStarting, Observed: driver.Stopped, Exited: true},
			want:   runDecision{StopReason: dotsv1.StopExited, ExitedUnasked: true, CountFailure: true},
		},
		"AlwaysStopped": {
			reason: "Always starts a stopped VM",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopUser, Observed: driver.Stopped},
			want:   runDecision{Action: actStart, StopReason: dotsv1.StopUser},
		},
		"AlwaysExitedRestarts": {
			reason: "Always restarts a VM that exited unasked, recording why",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerRunning, Observed: driver.Stopped, Exited: true},
			want:   runDecision{Action: actStart, StopReason: dotsv1.StopExited, ExitedUnasked: true},
		},
		"AlwaysHostRebooted": {
			reason: "records of an earlier boot: the VM is gone, and Always brings it back",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerRunning, Observed: driver.Stopped, StaleBoot: true},
			want:   runDecision{Action: actStart, StopReason: dotsv1.StopExited, ExitedUnasked: true},
		},
		"AlwaysBackoffHolds": {
			reason: "the crash-loop backoff holds the start and says how long",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopExited, Observed: driver.Stopped, BackoffLeft: 8 * time.Second},
			want:   runDecision{StopReason: dotsv1.StopExited, Wait: 8 * time.Second},
		},
		"AlwaysRunningAdopted": {
			reason: "a running VM after a server restart is adopted: no start",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerRunning, Observed: driver.Running},
			want:   runDecision{},
		},
		"AlwaysRebootRequested": {
			reason: "a reboot of a running VM whose Dot is not READY begins with a stop without a stop reason; the request stays pending for the start",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerRunning, Observed: driver.Running, RebootRequested: true, DotLeftReady: true},
			want:   runDecision{Action: actStop},
		},
		"RebootLeavesReadyFirst": {
			reason: "a reboot of a VM whose Dot is READY takes the Dot out of READY before the poweroff (ref 9.3)",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerRunning, Observed: driver.Running, RebootRequested: true},
			want:   runDecision{Action: actLeaveReady},
		},
		"RebootPowersOffOnceTheDotLeftReady": {
			reason: "a reboot leaving READY powers off once the Dot left, without preparing for a sleep",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerStopping, Observed: driver.Running, RebootRequested: true, DotLeftReady: true},
			want:   runDecision{Action: actStop},
		},
		"HaltedLeavesReadyFirst": {
			reason: "a person's stop of a VM whose Dot is READY takes the Dot out of READY before the poweroff (ref 9.3, 9.5)",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerRunning, Observed: driver.Running},
			want:   runDecision{Action: actLeaveReady, StopReason: dotsv1.StopUser},
		},
		"HaltedPowersOffOnceTheDotLeftReady": {
			reason: "a person's stop leaving READY powers off once the Dot left",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopUser, Observed: driver.Running, DotLeftReady: true},
			want:   runDecision{Action: actStop, StopReason: dotsv1.StopUser},
		},
		"IdleStopCalledOffByWork": {
			reason: "an idle stop not yet powered off is called off when work asked for a start meanwhile (ref 9.5)",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopIdle, Observed: driver.Running, DotLeftReady: true, StartRequested: true},
			want:   runDecision{CalledOff: true, StartHandled: true},
		},
		"IdleStopCalledOffByAlways": {
			reason: "an idle stop not yet powered off is called off when the strategy became Always",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopIdle, Observed: driver.Running},
			want:   runDecision{CalledOff: true},
		},
		"IdleStopPoweredOffIsNotCalledOff": {
			reason: "an idle stop whose guest was told to power off runs to its end; the start request waits for it",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopIdle, Observed: driver.Running, PoweroffSent: true, StartRequested: true},
			want:   runDecision{StopReason: dotsv1.StopIdle},
		},
		"PersonsStopIsNotCalledOffByAStart": {
			reason: "only an idle stop is called off: a person's stop leaving READY goes on",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopUser, Observed: driver.Running, DotLeftReady: true, StartRequested: true},
			want:   runDecision{Action: actStop, StopReason: dotsv1.StopUser},
		},
		"KillOverdueIsError": {
			reason: "a QEMU that outlived its SIGKILL for 10 s is killed again and the Computer is ERROR (ref 3.4)",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopUser, Observed: driver.Running, PoweroffSent: true, DeadlinePassed: true, KillOverdue: true},
			want:   runDecision{Action: actKill, StopReason: dotsv1.StopUser, KillOverdue: true},
		},
		"KillOverdueStaysOurStop": {
			reason: "an ERROR left by an overdue kill is still our stop: killed again, and done once QEMU is gone",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerError, PrevStopReason: dotsv1.StopUser, Observed: driver.Running, PoweroffSent: true, DeadlinePassed: true, KillOverdue: true},
			want:   runDecision{Action: actKill, StopReason: dotsv1.StopUser, KillOverdue: true},
		},
		"KillOverdueEnds": {
			reason: "the QEMU that outlived its kill is gone at last: the stop is done",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerError, PrevStopReason: dotsv1.StopUser, Observed: driver.Stopped, PoweroffSent: true, DeadlinePassed: true},
			want:   runDecision{StopReason: dotsv1.StopUser, StopDone: true},
		},
		"NeverListenedIsKilled": {
			reason: "a QEMU that never listened on its guest port within 30 s is killed and its start counted (ref 3.4)",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerStarting, Observed: driver.Running, NeverListened: true},
			want:   runDecision{Action: actKill, NeverListened: true},
		},
		"RebootStopDoneStarts": {
			reason: "once the reboot's stop ended, the pending request starts it and is handled",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopping, Observed: driver.Stopped, Exited: true, RebootRequested: true},
			want:   runDecision{Action: actStart, StopDone: true, RebootHandled: true},
		},
		"StoppingWaitsForPoweroff": {
			reason: "a STOPPING VM before its deadline is left to power itself off",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopUser, Observed: driver.Running, PoweroffSent: true},
			want:   runDecision{StopReason: dotsv1.StopUser},
		},
		"StoppingKilledAtDeadline": {
			reason: "a STOPPING VM past its deadline is killed",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopUser, Observed: driver.Running, PoweroffSent: true, DeadlinePassed: true},
			want:   runDecision{Action: actKill, StopReason: dotsv1.StopUser},
		},
		"StoppingRunsToItsEnd": {
			reason: "a stop already asked of the guest is not undone by a strategy of Always",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopUser, Observed: driver.Running, PoweroffSent: true, RebootRequested: true},
			want:   runDecision{StopReason: dotsv1.StopUser},
		},
		"StopDoneHalted": {
			reason: "a person's stop that ended is recorded, not an unasked exit",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopUser, Observed: driver.Stopped, Exited: true},
			want:   runDecision{StopReason: dotsv1.StopUser, StopDone: true},
		},
		"StopDoneAlwaysStartsAgain": {
			reason: "Always starts the VM again once a stop asked under another strategy ended",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopUser, Observed: driver.Stopped},
			want:   runDecision{Action: actStart, StopReason: dotsv1.StopUser, StopDone: true},
		},
		"SleepRequested": {
			reason: "an idle OnDemand VM prepares its engine and powers off, recorded idle",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerRunning, Observed: driver.Running, SleepRequested: true},
			want:   runDecision{Action: actLeaveReady, StopReason: dotsv1.StopIdle, SleepHandled: true},
		},
		"SleepOfADotNotReady": {
			reason: "an idle VM whose Dot is not READY prepares its engine and powers off at once",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerRunning, Observed: driver.Running, SleepRequested: true, DotLeftReady: true},
			want:   runDecision{Action: actStop, StopReason: dotsv1.StopIdle, SleepHandled: true, PrepareSleep: true},
		},
		"SleepWaitsForTheDotToLeaveReady": {
			reason: "a VM going to sleep is not told anything while its Dot is still READY (the deliverer may still send to it)",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopIdle, Observed: driver.Running},
			want:   runDecision{StopReason: dotsv1.StopIdle},
		},
		"SleepPowersOffOnceTheDotLeftReady": {
			reason: "once its Dot left READY, the engine prepares and the guest powers off",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopIdle, Observed: driver.Running, DotLeftReady: true},
			want:   runDecision{Action: actStop, StopReason: dotsv1.StopIdle, PrepareSleep: true},
		},
		"SleepPowersOffWhenTheDotIsLate": {
			reason: "a Dot that did not leave READY by the deadline does not keep its VM up",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopping, PrevStopReason: dotsv1.StopIdle, Observed: driver.Running, DeadlinePassed: true},
			want:   runDecision{Action: actStop, StopReason: dotsv1.StopIdle, PrepareSleep: true},
		},
		"SleepRequestedUnderAlways": {
			reason: "Always never sleeps: the request is moot",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerRunning, Observed: driver.Running, SleepRequested: true},
			want:   runDecision{SleepHandled: true},
		},
		"SleepLosesToStart": {
			reason: "work that asked for a start since wins over the sleep",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerRunning, Observed: driver.Running, SleepRequested: true, StartRequested: true},
			want:   runDecision{SleepHandled: true, StartHandled: true},
		},
		"PortTakenStartsAgain": {
			reason: "QEMU that lost its guest port at the start is started again, not counted",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStarting, Observed: driver.Stopped, Exited: true, PortTaken: true},
			want:   runDecision{Action: actStart},
		},
		"RebootOfStoppedStarts": {
			reason: "a reboot request of a stopped OnDemand VM starts it",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopIdle, Observed: driver.Stopped, RebootRequested: true},
			want:   runDecision{Action: actStart, StopReason: dotsv1.StopIdle, RebootHandled: true},
		},
		"GuestStuckRebootsAfterBackoff": {
			reason: "a guest stuck at its start (counted) is stopped once the backoff allows, and started again after",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerStarting, Observed: driver.Running, GuestStuck: true, DotLeftReady: true},
			want:   runDecision{Action: actStop},
		},
		"GuestStuckWaitsForBackoff": {
			reason: "the backoff holds the reboot of a stuck guest too",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerStarting, Observed: driver.Running, GuestStuck: true, BackoffLeft: 3 * time.Second},
			want:   runDecision{Wait: 3 * time.Second},
		},
		"GuestStuckUnderHaltedStops": {
			reason: "Halted stops a stuck guest rather than rebooting it",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStarting, Observed: driver.Running, GuestStuck: true, DotLeftReady: true},
			want:   runDecision{Action: actStop, StopReason: dotsv1.StopUser},
		},
		"StartRequestWhileRunningIsMoot": {
			reason: "a start request of a running VM is recorded handled without an action",
			in:     runInput{Strategy: onDemand, PrevState: dotsv1.ComputerRunning, Observed: driver.Running, StartRequested: true},
			want:   runDecision{StartHandled: true},
		},
		"HaltedRunningStops": {
			reason: "Halted stops a running VM whose Dot is not READY at once, for the person",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerRunning, Observed: driver.Running, DotLeftReady: true},
			want:   runDecision{Action: actStop, StopReason: dotsv1.StopUser},
		},
		"HaltedAsleepRecordsUser": {
			reason: "the person's stop of a VM already asleep is recorded",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopIdle, Observed: driver.Stopped},
			want:   runDecision{StopReason: dotsv1.StopUser},
		},
		"HaltedIgnoresStartRequest": {
			reason: "Halted wins over a start request, which waits for another strategy",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerStopped, PrevStopReason: dotsv1.StopUser, Observed: driver.Stopped, StartRequested: true, RebootRequested: true},
			want:   runDecision{StopReason: dotsv1.StopUser},
		},
		"ErrorTouchesNothing": {
			reason: "a VM in ERROR is never started, stopped or rebooted",
			in:     runInput{Strategy: always, PrevState: dotsv1.ComputerRunning, Observed: driver.Error, RebootRequested: true},
			want:   runDecision{},
		},
		"ErrorUnderHalted": {
			reason: "not even Halted kills a VM the host cannot prove is ours",
			in:     runInput{Strategy: halted, PrevState: dotsv1.ComputerRunning, Observed: driver.Error},
			want:   runDecision{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := decideRun(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\ndecideRun(%+v): -want +got:\n%s", tc.reason, tc.in, diff)
			}
		})
	}
}

func TestStartBackoff(t *testing.T) {
	tests := map[string]struct {
		count  int32
		jitter float64
		want   time.Duration
	}{
		"NoFailure":      {count: 0, want: 0},
		"First":          {count: 1, want: 2 * time.Second},
		"FirstJitterMax": {count: 1, jitter: 0.999, want: 2*time.Second + time.Duration(0.999*float64(time.Second))},
		"Third":          {count: 3, want: 18 * time.Second},
		"ThirdJitter":    {count: 3, jitter: 0.5, want: 18*time.Second + 4500*time.Millisecond},
		"Capped":         {count: 13, want: maxStartBackoff},
		"CappedJitter":   {count: 12, jitter: 0.5, want: maxStartBackoff},
		"Huge":           {count: 1 << 30, want: maxStartBackoff},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := startBackoff(tc.count, tc.jitter); got != tc.want {
				t.Errorf("startBackoff(%d, %v) = %v; want %v", tc.count, tc.jitter, got, tc.want)
			}
		})
	}
}

func TestShapeNote(t *testing.T) {
	c := &dotsv1.Computer{}
	c.Name = "helper"
	c.Spec.CPU = 2
	c.Spec.Memory = resource.MustParse("4Gi")
	tests := map[string]struct {
		obs      driver.Observation
		wantNote bool
	}{
		"Same":          {obs: driver.Observation{CPUs: 2, MemoryMiB: 4096}},
		"NoShapeRecord": {obs: driver.Observation{}},
		"MoreCPUs":      {obs: driver.Observation{CPUs: 1, MemoryMiB: 4096}, wantNote: true},
		"LessMemory":    {obs: driver.Observation{CPUs: 2, MemoryMiB: 2048}, wantNote: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := shapeNote(c, tc.obs)
			if (got != "") != tc.wantNote {
				t.Errorf("shapeNote(spec 2 CPUs 4096 MiB, observed %d CPUs %d MiB) = %q; want a note: %v", tc.obs.CPUs, tc.obs.MemoryMiB, got, tc.wantNote)
			}
		})
	}
}
