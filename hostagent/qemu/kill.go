package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/hostagent/driver"
)

// verdict is what the host can prove about a record's process.
type verdict int

const (
	gone     verdict = iota // no such process (or another one now holds the pid)
	ours                    // this VM's QEMU: the kill rule holds
	unproven                // alive, but not provably this VM's QEMU
	// starting: the recorded process (pid, start time, uid) is alive and
	// its record is younger than portGrace, but its guest port does not
	// listen yet. QEMU opens the port a moment after it starts, and a start
	// no longer waits for it, so an agent that restarted in that moment
	// sees this. It is observed as running; it is not killed (the rule
	// wants the port).
	starting
)

// portGrace is how long after its record a QEMU may not listen yet.
const portGrace = 30 * time.Second

// identify applies the kill rule of ref 3.4 to a record of this boot: a
// process this driver spawned whose exit it has not seen, or a pid alive,
// of this user, with the recorded start time, whose guest port accepts a TCP
// connection. A recycled pid fails on its start time; a foreign listener on
// the port fails on the pid.
func (d *Driver) identify(rec record) (verdict, string) {
	if c := d.childOf(rec.PID); c != nil && c.startTicks == rec.ProcStartTicks {
		if c.exited() {
			return gone, ""
		}
		return ours, ""
	}
	info, err := readProc(rec.PID)
	if err != nil {
		return unproven, fmt.Sprintf("cannot read process %d: %v", rec.PID, err)
	}
	if !info.Exists {
		return gone, ""
	}
	if rec.ProcStartTicks != 0 && info.StartTicks != rec.ProcStartTicks {
		// The kernel handed the pid to another process since.
		return gone, ""
	}
	if ok, err := signalable(rec.PID); !ok {
		if err == nil {
			return gone, ""
		}
		return unproven, fmt.Sprintf("process %d cannot be signalled (%v): it is another user's", rec.PID, err)
	}
	if info.UID != os.Getuid() {
		return unproven, fmt.Sprintf("process %d belongs to uid %d, not to this server's uid %d", rec.PID, info.UID, os.Getuid())
	}
	if !portAccepts(rec.GuestPort) {
		if !rec.StartedAt.IsZero() && time.Since(rec.StartedAt) < portGrace {
			return starting, fmt.Sprintf("process %d does not listen on its guest port %d yet", rec.PID, rec.GuestPort)
		}
		return unproven, fmt.Sprintf("process %d is alive but does not listen on its guest port %d", rec.PID, rec.GuestPort)
	}
	return ours, ""
}

// mayKill is the kill rule, checked right before every kill.
func (d *Driver) mayKill(rec record) (bool, verdict, string) {
	now, err := d.boot()
	if err != nil {
		return false, unproven, err.Error()
	}
	if !now.SameBoot(rec.Stamp) {
		return false, gone, "its record was written before the host restarted"
	}
	v, why := d.identify(rec)
	return v == ours, v, why
}

// kill sends SIGKILL to a record's process after checking the kill rule
// again. A process already gone is not an error.
func (d *Driver) kill(rec record) error {
	ok, v, why := d.mayKill(rec)
	if v == gone {
		return nil
	}
	if !ok {
		return fmt.Errorf("%w: not killing pid %d: %s", driver.ErrVMError, rec.PID, why)
	}
	if err := syscall.Kill(rec.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill qemu pid %d: %w", rec.PID, err)
	}
	return nil
}

// waitGone waits until the record's process has exited, up to timeout.
func (d *Driver) waitGone(ctx context.Context, rec record, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(d.pollInterval)
	defer tick.Stop()
	c := d.childOf(rec.PID)
	if c != nil && c.startTicks != rec.ProcStartTicks {
		c = nil
	}
	for {
		if c != nil {
			if c.exited() {
				return true
			}
		} else {
			info, err := readProc(rec.PID)
			if err == nil && (!info.Exists || (rec.ProcStartTicks != 0 && info.StartTicks != rec.ProcStartTicks)) {
				return true
			}
		}
		var done <-chan struct{}
		if c != nil {
			done = c.done
		}
		select {
		case <-done:
			return true
		case <-tick.C:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
