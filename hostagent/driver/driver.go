// Package driver is the contract between the Computer reconciler and whatever
// runs VMs on a host (the QEMU driver in hostagent/qemu today, a remote host
// agent later). It is shaped like crossplane-runtime's ExternalClient:
// Observe reports facts about the VM and never changes anything; Start, Stop,
// Destroy and Reboot are idempotent, so a reconciler that crashed half-way can
// simply call them again. The reconciler decides; the driver only acts and
// reports.
package driver

import (
	"context"
	"errors"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// State is the VM's state as the host sees it (ref 3.4). The transitional
// states of ref 9.3 (PROVISIONING, STARTING, STOPPING, DELETING) belong to
// the reconciler, which knows what it asked for.
type State string

const (
	// Running: the record's process is this VM's QEMU (the kill rule holds).
	Running State = "RUNNING"
	// Stopped: no record, its process is gone, or it was written before the
	// host last restarted.
	Stopped State = "STOPPED"
	// Error: something is there that cannot be proven to be this VM's QEMU
	// (a live pid that does not listen on its port, another user's process,
	// a record that does not parse). It is never killed and never started
	// over, because a second QEMU on the same disk would corrupt it.
	Error State = "ERROR"
)

// Observation is what Observe found. Every field is a fact read from the
// host; none is a decision.
type Observation struct {
	// Provisioned is true when the VM's overlay disk exists.
	Provisioned bool
	State       State
	// PID and GuestPort come from qemu.json; zero when there is no record.
	PID       int
	GuestPort int
	// Boot is the boot id and uptime qemu.json was written with.
	Boot home.Stamp
	// StartedAt is when the record was written (the spawn).
	StartedAt time.Time
	// GoldenImage and RuntimeImage are the image versions the running (or
	// last) QEMU was started with.
	GoldenImage  string
	RuntimeImage string
	// CPUs and MemoryMiB are the shape QEMU was started with: a spec that
	// differs needs a reboot to apply (the reconciler decides when).
	CPUs      int
	MemoryMiB int64

	// Exited: a record of this boot whose process is gone. QEMU exited since
	// it was started: the guest powered off, QEMU crashed or was killed. The
	// reconciler knows whether it asked for a stop; if not, stopReason is
	// "exited".
	Exited bool
	// ExitStatus is how QEMU ended ("exit status 0": the guest powered off;
	// "signal: killed"), when this process spawned it and saw it end; empty
	// when unknown (a QEMU of an earlier server process).
	ExitStatus string
	// StaleBoot: the record was written before the host restarted.
	StaleBoot bool
	// Problem says why State is Error, with what to do about it.
	Problem string
	// LogTail is the end of QEMU's own log and of the guest's serial console,
	// filled when the VM exited or is in Error, for Events and conditions.
	LogTail string
}

// Spec is what a start needs: the VM's identity and its shape.
type Spec struct {
	ID home.VMID
	// UID is the Computer's UID; the seed carries it as the Dot's id.
	UID string
	// CPUs and MemoryMiB size the machine (-smp, -m).
	CPUs      int
	MemoryMiB int64
	// DiskBytes is the overlay's virtual size; 0 keeps the golden image's.
	// Only the first start (the overlay's creation) uses it.
	DiskBytes int64
	// GoldenImage and RuntimeImage are image versions registered under
	// images/ (home.Layout.Golden, home.Layout.Runtime).
	GoldenImage  string
	RuntimeImage string
	// Token is the Dot's guest token: written into the seed, sent to the
	// guest only after it proved it holds it. Never logged.
	Token string
}

// StopResult says how a stop ended, for Events and tests.
type StopResult struct {
	// WasRunning is false when there was nothing to stop.
	WasRunning bool
	// PoweredOff: the guest accepted POST /v1/system/poweroff and QEMU
	// exited by itself within the grace period.
	PoweredOff bool
	// Killed: QEMU was killed (the guest refused or did not finish in time).
	Killed bool
}

// Driver runs the VMs of one host.
type Driver interface {
	// Observe reports the VM's state from the host's records and processes.
	// It never modifies anything. An error means the host could not be read;
	// a VM in trouble is an Observation with State Error, not an error.
	Observe(ctx context.Context, id home.VMID) (Observation, error)
	// Start provisions the VM on first use (overlay disk), writes its seed,
	// and starts QEMU; it returns once the guest port listens and QEMU is
	// still alive a second later. A running VM is left alone and observed.
	Start(ctx context.Context, spec Spec) (Observation, error)
	// Stop asks the guest to power off with the token, waits for QEMU to
	// exit, then kills it (the kill rule checked again first). Stopping a
	// stopped VM succeeds and clears what its record left behind.
	Stop(ctx context.Context, id home.VMID, token string) (StopResult, error)
	// Reboot is Stop then Start: a new runtime ISO, CPU count or memory size
	// applies, and the guest port changes.
	Reboot(ctx context.Context, spec Spec) (Observation, error)
	// Destroy kills the VM without a poweroff and removes its directory and
	// logs. Destroying a VM that does not exist succeeds.
	Destroy(ctx context.Context, id home.VMID) error
	// Health asks the running VM's guest GET /v1/health through the proven
	// channel (ref 5.1): the token goes only to a listener that proved it
	// holds it. An unproven listener is guestclient.ErrGuestUnproven, not
	// retried (a security event: something else holds the port); a guest
	// that is not up yet is guestclient.ErrGuestNotAnswering (ask again).
	Health(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error)
}

// ErrVMError is wrapped by Start, Stop and Destroy when the VM is in state
// Error: the driver refuses to act on something it cannot prove is its own.
var ErrVMError = errors.New("vm is in state ERROR")

// ErrNotRunning is wrapped by Health when the VM has no running QEMU.
var ErrNotRunning = errors.New("vm is not running")
