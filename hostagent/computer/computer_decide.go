package computer

import (
	"math"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
)

// vmAction is the one thing a reconcile asks the driver to do.
type vmAction string

const (
	actNone  vmAction = ""
	actStart vmAction = "Start"
	// actStop asks the guest to power off and records STOPPING with a
	// deadline; it does not wait for QEMU to exit.
	actStop vmAction = "Stop"
	// actLeaveReady records STOPPING without a poweroff yet: every stop,
	// reboot and sleep takes the Dot out of READY first, so nothing more is
	// delivered to a guest going down (ref 9.3, 9.5); the next reconcile
	// (prepares the engine for a sleep and) powers off.
	actLeaveReady vmAction = "LeaveReady"
	// actKill kills a STOPPING VM whose guest did not power off by the
	// deadline (the kill rule checked again first).
	actKill vmAction = "Kill"
)

// runInput is what the run-strategy decision reads: the spec, the status
// as the last reconcile left it, the host's observation and the pending
// requests. Nothing in it is fetched by decideRun.
type runInput struct {
	Strategy dotsv1.RunStrategy
	// PrevState and PrevStopReason are the status before this reconcile.
	PrevState      dotsv1.ComputerState
	PrevStopReason dotsv1.StopReason
	// Observed is the driver's state; Exited and StaleBoot its facts about
	// a QEMU that is gone.
	Observed  driver.State
	Exited    bool
	StaleBoot bool
	// StartRequested and RebootRequested: an annotation value not yet
	// handled.
	StartRequested  bool
	RebootRequested bool
	// SleepRequested: the control plane found the Dot idle (an annotation
	// value not yet handled).
	SleepRequested bool
	// BackoffLeft is how long the crash-loop backoff still holds starts.
	BackoffLeft time.Duration
	// GuestStuck: QEMU runs but its guest did not answer within the start
	// timeout, that start is counted as failed, and it still does not
	// answer. It is rebooted once the backoff allows.
	GuestStuck bool
	// DeadlinePassed: the STOPPING VM's stopDeadline is past.
	DeadlinePassed bool
	// PoweroffSent: the STOPPING VM's guest was asked to power off
	// (status.poweroffTime); not yet, for a VM going to sleep whose Dot
	// is leaving READY.
	PoweroffSent bool
	// DotLeftReady: the VM's Dot is no longer READY (or is gone): nothing
	// more is delivered to its guest, so a stop may power it off.
	DotLeftReady bool
	// NeverListened: QEMU runs but its guest port has not accepted a
	// connection within ListenTimeout of its start (ref 3.4: 30 s). Not a
	// guest slow to boot (its port listens): QEMU itself is stuck.
	NeverListened bool
	// KillOverdue: the STOPPING VM's QEMU was killed at its deadline and
	// still runs KillWait later (ref 3.4: 10 s).
	KillOverdue bool
	// PortTaken: QEMU exited at its start because its guest port was taken
	// between picking it and binding it; not a failure, started again.
	PortTaken bool
	// Gated: the Computer carries a start gate (spec.startGates): a VM
	// that is down is not started, whatever asks, until the gate is gone;
	// its start request waits, unhandled.
	Gated bool
}

// runDecision is what to do and what to record.
type runDecision struct {
	Action vmAction
	// StopReason is the reason to record (kept when the VM stays stopped,
	// cleared by a start).
	StopReason dotsv1.StopReason
	// ExitedUnasked: the VM was running (or starting) and its QEMU is gone
	// without a stop from us: an Event, and for a start that never reached
	// RUNNING, one more consecutive failure.
	ExitedUnasked bool
	// CountFailure: the exit was of a start that never reached RUNNING.
	CountFailure bool
	// Wait is set when a start is due but the backoff holds it.
	Wait time.Duration
	// StopDone: the VM was STOPPING and QEMU is gone: our stop ended.
	StopDone bool
	// StartHandled and RebootHandled: the pending request is consumed by
	// this decision (acted on, or moot) once the action succeeds.
	StartHandled  bool
	RebootHandled bool
	SleepHandled  bool
	// PrepareSleep: tell the engine to prepare before the poweroff.
	PrepareSleep bool
	// CalledOff: an idle stop not yet powered off is called off, because
	// work arrived (a start request) or the strategy is Always now: the VM
	// is RUNNING again and its Dot goes back to READY.
	CalledOff bool
	// NeverListened: the QEMU is killed for never listening; its start
	// counts as failed.
	NeverListened bool
	// KillOverdue: QEMU outlived its SIGKILL: the Computer is ERROR with the
	// reason, and the kill is tried again.
	KillOverdue bool
}

// decideRun maps the run strategy and what the host shows to one action:
// KubeVirt's syncRunStrategy in one switch. It is a pure function; the table
// test covers it.
func decideRun(in runInput) runDecision {
	d := runDecision{StopReason: in.PrevStopReason}
	if in.Observed == driver.Error {
		// Nothing is started, stopped or rebooted on a VM the host cannot
		// prove is ours: a second QEMU on its disk would corrupt it.
		return d
	}
	running := in.Observed == driver.Running
	// A stop whose kill QEMU outlived left the Computer ERROR; it is still
	// our stop, and runs to its end.
	stopping := in.PrevState == dotsv1.ComputerStopping || (in.PrevState == dotsv1.ComputerError && in.PoweroffSent)
	wasUp := in.PrevState == dotsv1.ComputerRunning || in.PrevState == dotsv1.ComputerStarting
	switch {
	case running && stopping && !in.PoweroffSent:
		// Leaving READY before the poweroff. An idle stop is called off
		// when work arrived meanwhile (ref 9.5): nothing was said to the
		// guest yet.
		if in.PrevStopReason == dotsv1.StopIdle && (in.StartRequested || in.Strategy == dotsv1.RunAlways) {
			d.Action, d.CalledOff, d.StopReason = actNone, true, ""
			d.StartHandled = in.StartRequested
			return d
		}
		// Once the Dot left READY (or it did not in time), the engine
		// prepares for a sleep and the guest powers off.
		if in.DotLeftReady || in.DeadlinePassed {
			d.Action, d.PrepareSleep = actStop, in.PrevStopReason == dotsv1.StopIdle
		}
		return d
	case running && stopping:
		// A guest told to power off cannot be told otherwise: the stop runs
		// to its end whatever the strategy says now, then the strategy
		// decides.
		if in.DeadlinePassed {
			d.Action = actKill
			d.KillOverdue = in.KillOverdue
		}
		return d
	case running && in.NeverListened:
		// QEMU never set up its network: no guest can come up behind it.
		// It is killed (it is this driver's own child, or it could not be
		// proven ours and is ERROR already), and the start counts as failed.
		d.Action, d.NeverListened = actKill, true
		return d
	case !running && stopping:
		d.StopDone = true
	case !running && wasUp && in.PrevState == dotsv1.ComputerStarting && in.PortTaken:
		// Lost the race for the guest port: not the guest's fault.
		return startUnlessBackoff(d, in)
	case !running && wasUp:
		// It was up when we last looked and we did not stop it (a stop of
		// ours records STOPPING first): QEMU exited, was killed, or the
		// host restarted (Exited, StaleBoot).
		d.ExitedUnasked = true
		d.CountFailure = in.PrevState == dotsv1.ComputerStarting
		d.StopReason = dotsv1.StopExited
	}

	// A sleep request is for an OnDemand VM; anywhere else it is moot.
	d.SleepHandled = in.SleepRequested
	switch in.Strategy {
	case dotsv1.RunHalted:
		// The person stopped it: stop a running VM, record a stopped one as
		// theirs. Requests to start or reboot wait for another strategy
		// (a start through the CLI sets OnDemand first).
		d.StopReason = dotsv1.StopUser
		if running {
			return stopAfterReady(d, in)
		}
		return d

	case dotsv1.RunAlways:
		if running {
			return keepRunning(d, in)
		}
		return startUnlessBackoff(d, in)

	default: // OnDemand, and an empty strategy (the CRD defaults it).
		if running && in.SleepRequested && !in.StartRequested && !in.RebootRequested {
			// Idle: the Dot leaves READY, then the engine prepares and
			// the VM powers off.
			d.StopReason, d.SleepHandled = dotsv1.StopIdle, true
			return stopAfterReady(d, in)
		}
		if running {
			return keepRunning(d, in)
		}
		// OnDemand starts the VM at create (no stop reason yet) and after a
		// person lifted Halted (reason user); a VM asleep (idle) or exited
		// stays down until something asks: a start or reboot request now,
		// the idle and work logic later.
		wake := in.StartRequested || in.RebootRequested ||
			d.StopReason == "" || d.StopReason == dotsv1.StopUser
		if !wake {
			return d
		}
		return startUnlessBackoff(d, in)
	}
}

// keepRunning is the decision for a VM that runs and should: a requested
// reboot, a reboot of a guest stuck at its start once the backoff allows,
// or nothing. A reboot is a stop with no stop reason: once QEMU is gone,
// the strategy starts it again (the request, still pending, is handled by
// that start).
func keepRunning(d runDecision, in runInput) runDecision {
	d.StartHandled = in.StartRequested
	switch {
	case in.RebootRequested:
		d.StopReason = ""
		return stopAfterReady(d, in)
	case in.GuestStuck && in.BackoffLeft > 0:
		d.Wait = in.BackoffLeft
	case in.GuestStuck:
		d.StopReason = ""
		return stopAfterReady(d, in)
	}
	return d
}

// stopAfterReady is how every stop, reboot and sleep of a running VM
// begins (ref 9.3): a Dot still READY leaves READY first (STOPPING, no
// poweroff yet); one that is not is powered off now (an idle one after its
// engine prepared).
func stopAfterReady(d runDecision, in runInput) runDecision {
	if !in.DotLeftReady {
		d.Action = actLeaveReady
		return d
	}
	d.Action, d.PrepareSleep = actStop, d.StopReason == dotsv1.StopIdle
	return d
}

// startUnlessBackoff starts the VM, or waits out the crash-loop backoff.
func startUnlessBackoff(d runDecision, in runInput) runDecision {
	if in.Gated {
		return d
	}
	if in.BackoffLeft > 0 {
		d.Wait = in.BackoffLeft
		return d
	}
	d.Action = actStart
	d.StartHandled = in.StartRequested
	d.RebootHandled = in.RebootRequested
	return d
}

// maxStartBackoff caps the crash-loop backoff (KubeVirt's 300 s).
const maxStartBackoff = 300 * time.Second

// startBackoffUnit is the delay after the first failure; the n-th waits
// n² units plus up to half as much again of jitter.
const startBackoffUnit = 2 * time.Second

// startBackoff is the wait before the next start after count consecutive
// failures: count² units, plus jitter (jitter in [0,1) scales up to half of
// that), capped at maxStartBackoff. KubeVirt's rule, with our unit.
func startBackoff(count int32, jitter float64) time.Duration {
	if count < 1 {
		return 0
	}
	if count > 20 { // 20² units is past the cap already; avoids overflow
		return maxStartBackoff
	}
	base := time.Duration(count) * time.Duration(count) * startBackoffUnit
	d := base + time.Duration(math.Max(0, math.Min(jitter, 1))*float64(base)/2)
	if d > maxStartBackoff {
		return maxStartBackoff
	}
	return d
}
