package qemu

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// The driver's calls never wait for a guest; the Computer reconciler
// composes them into a stop over several reconciles. The helpers here
// compose them the same way within one call, for tests and benchmarks.

// stopPoweroffCall bounds the poweroff request, as the Computer reconciler
// bounds it: a guest accepts a poweroff at once or not at all.
const stopPoweroffCall = 2 * time.Second

// observePoll is how often the helpers look at a VM again.
const observePoll = 50 * time.Millisecond

// maxKills bounds the Kill calls of one stop; each waits up to KillWait.
const maxKills = 10

// stopped is how a stop composed of Poweroff, Observe and Kill ended.
type stopped struct {
	// WasRunning: the VM was running when the stop began.
	WasRunning bool
	// PoweroffErr is why the guest did not accept the poweroff; nil when it
	// accepted it.
	PoweroffErr error
	// PoweredOff: the guest accepted the poweroff and QEMU exited by itself
	// within the grace.
	PoweredOff bool
	// Killed: QEMU still ran when Kill came, and was killed.
	Killed bool
	// ExitStatus is how QEMU ended as the last Observe before the first Kill
	// saw it ("exit status 0" after the guest's poweroff); empty when it
	// still ran or was not spawned by this driver.
	ExitStatus string
	// Took is how long the guest took from the poweroff to QEMU's exit,
	// when it powered itself off.
	Took time.Duration
}

// stopVM stops a VM the way the Computer reconciler does: Poweroff; when the
// guest accepted it, Observe until QEMU no longer runs or the grace passes;
// then Kill until it reports Gone, which kills a QEMU still running and
// clears the record of one that exited by itself. A guest that does not
// accept the poweroff is killed at once.
func stopVM(ctx context.Context, d *Driver, id home.VMID, token string, grace time.Duration) (stopped, error) {
	var s stopped
	obs, err := d.Observe(ctx, id)
	if err != nil {
		return s, err
	}
	s.WasRunning = obs.State == driver.Running
	pctx, cancel := context.WithTimeout(ctx, stopPoweroffCall)
	s.PoweroffErr = d.Poweroff(pctx, id, token)
	cancel()
	if s.PoweroffErr == nil {
		asked := time.Now()
		deadline := asked.Add(grace)
		for obs.State == driver.Running && time.Now().Before(deadline) {
			time.Sleep(observePoll)
			if obs, err = d.Observe(ctx, id); err != nil {
				return s, err
			}
		}
		s.PoweredOff = obs.State == driver.Stopped && obs.Exited
		s.ExitStatus = obs.ExitStatus
		if s.PoweredOff {
			s.Took = time.Since(asked)
		}
	}
	for range maxKills {
		k, err := d.Kill(ctx, id)
		if err != nil {
			return s, err
		}
		s.Killed = s.Killed || k.WasRunning
		if k.Gone {
			return s, nil
		}
	}
	return s, fmt.Errorf("stop %s: qemu still runs after %d kills", id, maxKills)
}

// rebootVM is a reboot as the reconciler does it: a stop, then a start
// (a new QEMU, so a new shape applies).
func rebootVM(ctx context.Context, d *Driver, spec driver.Spec, grace time.Duration) (driver.Observation, error) {
	if _, err := stopVM(ctx, d, spec.ID, spec.Token, grace); err != nil {
		return driver.Observation{}, fmt.Errorf("reboot: %w", err)
	}
	return d.Start(ctx, spec)
}

// destroyVM calls Destroy until the killed QEMU has exited, as the
// reconciler asks again on ErrStillRunning.
func destroyVM(ctx context.Context, d *Driver, id home.VMID) error {
	var err error
	for range maxKills {
		if err = d.Destroy(ctx, id); !errors.Is(err, driver.ErrStillRunning) {
			return err
		}
	}
	return err
}

// cleanupVM destroys the VM when the test ends, failing the test when it
// cannot (a QEMU left behind would outlive the test).
func cleanupVM(t testing.TB, d *Driver, id home.VMID) {
	t.Helper()
	t.Cleanup(func() {
		if err := destroyVM(context.Background(), d, id); err != nil {
			t.Errorf("destroy %s at the end of the test: %v", id, err)
		}
	})
}

// waitObserved observes the VM until cond holds, failing the test with the
// last observation when it does not within the timeout.
func waitObserved(t testing.TB, d *Driver, id home.VMID, timeout time.Duration, what string, cond func(driver.Observation) bool) driver.Observation {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		o, err := d.Observe(context.Background(), id)
		if err != nil {
			t.Fatalf("Observe() while waiting for %s: %v", what, err)
		}
		if cond(o) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s; last Observe() = %+v", what, timeout, o)
		}
		time.Sleep(observePoll)
	}
}

// notRunning is the condition of a QEMU that has exited (or never ran).
func notRunning(o driver.Observation) bool { return o.State != driver.Running }
