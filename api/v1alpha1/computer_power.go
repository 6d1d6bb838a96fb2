package v1alpha1

import (
	"errors"
	"fmt"
	"time"
)

// The power rule: what a start, a stop, a reboot and a sleep write on a
// Computer. It lives here, on the type, so the command line, the Dots API
// (and through it the web client) and the control plane's own wake and
// sleep write the same fields the same way; the Computer's reconciler acts
// on what they wrote (DESIGN.md 3). Each method changes only the object in
// memory: the caller writes it, as a patch over the version it read.

// ErrHalted is RequestReboot's refusal of a Computer a person stopped
// (runStrategy Halted); errors.Is finds it in what RequestReboot returns.
var ErrHalted = errors.New("it is stopped by a person (runStrategy Halted)")

// RequestStart asks for one start at now. A start is someone's wish that it
// runs, so it lifts a person's stop (Halted becomes OnDemand: from that start
// on it sleeps and wakes like any other); Always and OnDemand are left as
// they are. The annotation's value is new at every request, so the
// reconciler, which records the value it acted on, starts it once more even
// when an earlier request was handled.
func (c *Computer) RequestStart(now time.Time) {
	if c.Spec.RunStrategy == RunHalted {
		c.Spec.RunStrategy = RunOnDemand
	}
	c.setRequest(StartRequestedAnnotation, now)
}

// Halt is a person's stop: runStrategy Halted powers the VM off and keeps it
// off, its automations paused, until a start (a person's, or work for the
// Dot) lifts it. It is a state of the spec, not a one-off request, so it
// writes no annotation.
func (c *Computer) Halt() {
	c.Spec.RunStrategy = RunHalted
}

// RequestReboot asks for one stop and start at now (a new runtime image, CPU
// count or memory size applies). It is refused while a person's stop holds:
// a reboot would start the VM against that stop without lifting it, so the
// one to ask for is a start, which lifts it and boots afresh. The error
// wraps ErrHalted.
func (c *Computer) RequestReboot(now time.Time) error {
	if c.Spec.RunStrategy == RunHalted {
		return fmt.Errorf("%w: start it instead, with 'invisible-dots computer start %s'", ErrHalted, c.Name)
	}
	c.setRequest(RebootRequestedAnnotation, now)
	return nil
}

// RequestSleep asks a running OnDemand VM to sleep once, at now: the control
// plane's decision when the Dot has had no work for its idleTimeout. A
// person's stop is Halt, not this: a sleep keeps the Dot waking for its work.
func (c *Computer) RequestSleep(now time.Time) {
	c.setRequest(SleepRequestedAnnotation, now)
}

// setRequest writes a request annotation with the time of the request, in
// UTC to the nanosecond, so two requests are two values (RequestPending).
func (c *Computer) setRequest(key string, now time.Time) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[key] = now.UTC().Format(time.RFC3339Nano)
}
