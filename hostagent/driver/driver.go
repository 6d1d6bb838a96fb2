// Package driver is the contract between the host agent's Computer
// reconciler and what runs VMs on its host (the QEMU driver in
// hostagent/qemu). It is shaped like crossplane-runtime's ExternalClient:
// Observe reports facts about the VM and never changes anything; Start,
// Poweroff, Kill and Destroy are idempotent and never wait for a guest, so a
// reconciler that crashed half-way can simply call them again and no call
// holds a worker. The reconciler decides; the driver only acts and reports.
package driver

import (
	"context"
	"errors"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
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
	// PortTaken: QEMU exited at its start because the guest port was taken
	// between picking it and binding it (its log says so): start again.
	PortTaken bool
	// NotListening: QEMU runs (State Running) but its guest port does not
	// accept a connection yet. QEMU's user network listens from the moment
	// it is set up, whether or not the guest boots, so a QEMU that never
	// does is stuck before its guest (killed after ref 3.4's 30 s), unlike
	// a guest slow to boot, whose port listens while its health does not
	// answer.
	NotListening bool
	// Problem says why State is Error, with what to do about it.
	Problem string
	// LogTail is the end of QEMU's own log and of the guest's serial console,
	// filled when the VM exited or is in Error, for Events and conditions.
	LogTail string
	// Fix is the command that fixes why QEMU exited, with what it does
	// (hostfix.Fix.String), when its log of that start names a cause of the
	// host that has one (KVM missing or closed, a CPU model KVM refuses);
	// empty otherwise.
	Fix string
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
	// images/; empty leaves the choice to the driver (see Start).
	GoldenImage  string
	RuntimeImage string
	// Token is the Dot's guest token: written into the seed, sent to the
	// guest only after it proved it holds it. Never logged.
	Token string
}

// KillResult says what a kill found and did.
type KillResult struct {
	// WasRunning is false when there was nothing to kill (a record of a
	// process already gone is cleared all the same).
	WasRunning bool
	// Gone: no QEMU of this VM runs any more. False means the process was
	// signalled and had not exited yet when the call returned: look again.
	Gone bool
}

// Image is an image registered on the host.
type Image struct {
	Kind    home.ImageKind
	Version string
}

// Newest is the newest version of kind among imgs (home.OlderImage), or ""
// when there is none.
func Newest(imgs []Image, kind home.ImageKind) string {
	newest := ""
	for _, img := range imgs {
		if img.Kind == kind && (newest == "" || home.OlderImage(newest, img.Version)) {
			newest = img.Version
		}
	}
	return newest
}

// Driver runs the VMs of one host: a VM's lifecycle and the channel to its
// guest, composed as Lima composes its drivers. Abilities a driver may lack
// are small interfaces of their own (SleepPreparer, ImageLister), found with
// a type assertion. No call waits for a guest: each asks or acts, and
// returns within about a second of I/O; the reconciler sees the result on a
// later Observe (crossplane's "none of the calls here should be blocking").
// A call holds one VM's lock only for its own I/O.
type Driver interface {
	Lifecycle
	GuestChannel
}

// Lifecycle is a VM's life on the host: its records, its QEMU and its files.
type Lifecycle interface {
	// Observe reports the VM's state from the host's records and processes.
	// It never modifies anything. An error means the host could not be read;
	// a VM in trouble is an Observation with State Error, not an error.
	Observe(ctx context.Context, id home.VMID) (Observation, error)
	// Start provisions the VM on first use (overlay disk), writes its seed,
	// spawns QEMU and writes its record, and returns: the wait for the guest
	// port and for health is the caller's polling. Images not named in the
	// spec are the driver's choice: the golden image an existing disk sits
	// on, else the newest registered. A running VM is left alone and observed.
	Start(ctx context.Context, spec Spec) (Observation, error)
	// Kill sends SIGKILL to the VM's QEMU under the kill rule (checked again
	// right before), waits about a second for it to go, and clears its
	// record once it is gone. Killing a stopped VM clears what its record
	// left behind.
	Kill(ctx context.Context, id home.VMID) (KillResult, error)
	// Destroy kills the VM without a poweroff and removes its directory and
	// logs. Destroying a VM that does not exist succeeds; one whose QEMU has
	// not exited yet is ErrStillRunning (ask again).
	Destroy(ctx context.Context, id home.VMID) error
}

// GuestChannel is what talks to a running VM's guest: the target the guest
// is reached at, and dot-agentd's own routes on the proven channel (ref
// 5.1): the token goes only to a listener that proved it holds it.
type GuestChannel interface {
	// GuestTarget is what the guest client reaches the VM's guest with, from
	// the VM's record alone: its guest port and its QEMU's pid, start time
	// and boot id (the listener rule checks all four before every proof),
	// with token. It reads the record and the host's boot id and probes
	// nothing, so it is cheap to ask before every push. ErrNotRunning when
	// there is no record of this boot; an error when the record cannot be
	// read or does not give the QEMU's start time and boot id: such a guest
	// is not reached, never proved with less.
	GuestTarget(ctx context.Context, id home.VMID, token string) (guestclient.Target, error)
	// Health asks the running VM's guest GET /v1/health. An unproven
	// listener is guestclient.ErrGuestUnproven, not retried (a security
	// event: something else holds the port); a guest that is not up yet is
	// guestclient.ErrGuestNotAnswering (ask again).
	Health(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error)
	// Poweroff asks the running VM's guest to power itself off (POST
	// /v1/system/poweroff) and returns without waiting for QEMU to exit. An
	// error means the guest did not accept it.
	Poweroff(ctx context.Context, id home.VMID, token string) error
}

// SleepPreparer is a guest channel that can ask a guest's engine to prepare
// for a sleep. A driver without it powers a sleeping guest off unprepared.
type SleepPreparer interface {
	// PrepareSleep asks the running VM's engine to prepare for a sleep
	// (POST /v1/agent/prepare-sleep, ref 8.7) and returns its answer.
	PrepareSleep(ctx context.Context, id home.VMID, token string) error
}

// ImageLister is a driver that registers images on its host. A driver
// without it reports none, and its VMs start on images of its own choice.
type ImageLister interface {
	// Images lists the images registered on this host.
	Images(ctx context.Context) ([]Image, error)
}

// ErrVMError is wrapped by Start, Stop and Destroy when the VM is in state
// Error: the driver refuses to act on something it cannot prove is its own.
var ErrVMError = errors.New("vm is in state ERROR")

// ErrStillRunning is wrapped by Destroy when the killed QEMU had not exited
// yet when the call returned.
var ErrStillRunning = errors.New("vm's qemu has not exited yet")

// ErrNotRunning is wrapped by Health when the VM has no running QEMU.
var ErrNotRunning = errors.New("vm is not running")
