// Package qemu is the host agent's QEMU driver (ref 3): it provisions a VM's
// overlay and seed, spawns QEMU detached with one argv, records the process
// in qemu.json, and reads the VM's state back from that record, /proc and
// the guest port alone. QEMU has no monitor: it stops when the guest powers
// itself off, or when it is killed under the kill rule.
package qemu

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/hostfix"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.SleepPreparer = (*Driver)(nil)
	_ driver.ImageLister   = (*Driver)(nil)
)

// Options configure a Driver. Zero values take the defaults.
type Options struct {
	Home home.Layout
	// Config is host.yaml; New loads it when nil.
	Config *hostconfig.Config
	// Binaries are found by FindBinaries when empty.
	Binaries Binaries
	// Boot reads the host's boot id and uptime; home.CurrentBoot by default.
	// Tests inject another to fake a host restart.
	Boot home.BootSource
	// Guest is the proven guest client; a new one by default.
	Guest *guestclient.Client
	// Environ is the server's environment, filtered for QEMU; os.Environ by
	// default.
	Environ func() []string
}

// Driver runs QEMU VMs under one home.
type Driver struct {
	home    home.Layout
	cfg     hostconfig.Config
	bin     Binaries
	boot    home.BootSource
	guest   *guestclient.Client
	environ func() []string

	// KillWait is how long Kill and Destroy wait for a killed QEMU to
	// exit before they return (the caller looks again later).
	KillWait     time.Duration
	pollInterval time.Duration
	// version is QEMU's, read once by New.
	version hostconfig.Version
	// pickPort is freePort; a test hands out a taken port first.
	pickPort func() (int, error)

	mu       sync.Mutex
	vmLocks  map[home.VMID]*sync.Mutex
	children map[int]*child
	// exits keeps how the last QEMU this process spawned for a VM ended.
	exits map[home.VMID]exitInfo
}

// New returns a driver for a home. It finds QEMU and refuses one older than
// hostconfig.MinQEMU and a home QEMU cannot be given.
func New(ctx context.Context, o Options) (*Driver, error) {
	if err := home.QEMUPathProblem(o.Home.Root); err != nil {
		return nil, err
	}
	d := &Driver{
		home: o.Home, bin: o.Binaries, boot: o.Boot, guest: o.Guest, environ: o.Environ,
		KillWait: time.Second, pollInterval: 20 * time.Millisecond, pickPort: freePort,
		vmLocks: map[home.VMID]*sync.Mutex{}, children: map[int]*child{}, exits: map[home.VMID]exitInfo{},
	}
	if o.Config != nil {
		d.cfg = *o.Config
	} else {
		c, err := hostconfig.Load(o.Home)
		if err != nil {
			return nil, err
		}
		d.cfg = c
	}
	if err := d.cfg.Validate(); err != nil {
		return nil, err
	}
	if d.bin.System == "" {
		b, err := FindBinaries(os.Getenv)
		if err != nil {
			return nil, err
		}
		d.bin = b
	}
	v, err := Version(ctx, d.bin.System)
	if err != nil {
		return nil, err
	}
	if v.Less(hostconfig.MinQEMU) {
		return nil, fmt.Errorf("%s is QEMU %s, older than the %s this needs: install a newer QEMU (sudo apt-get install -y qemu-system-x86 qemu-utils)", d.bin.System, v, hostconfig.MinQEMU)
	}
	d.version = v
	if d.boot == nil {
		d.boot = home.CurrentBoot
	}
	if d.guest == nil {
		d.guest = guestclient.New()
	}
	if d.environ == nil {
		d.environ = os.Environ
	}
	if _, err := d.recoverStarts(); err != nil {
		return nil, err
	}
	return d, nil
}

// Accelerator is the accelerator QEMU runs guests with (kvm or tcg).
func (d *Driver) Accelerator() string { return d.cfg.EffectiveAccelerator() }

// QEMUVersion is the version of the host's QEMU.
func (d *Driver) QEMUVersion() string { return d.version.String() }

// Images implements driver.ImageLister: the golden and runtime images registered
// in the home.
func (d *Driver) Images(context.Context) ([]driver.Image, error) {
	var out []driver.Image
	for _, kind := range []home.ImageKind{home.Golden, home.Runtime} {
		list, err := images.List(d.home, kind)
		if err != nil {
			return nil, err
		}
		for _, img := range list {
			out = append(out, driver.Image{Kind: kind, Version: img.Version})
		}
	}
	return out, nil
}

// lock serialises the operations that change one VM.
func (d *Driver) lock(id home.VMID) func() {
	d.mu.Lock()
	l, ok := d.vmLocks[id]
	if !ok {
		l = &sync.Mutex{}
		d.vmLocks[id] = l
	}
	d.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Observe implements driver.Lifecycle. It reads qemu.json, /proc and the guest
// port, and changes nothing.
func (d *Driver) Observe(ctx context.Context, id home.VMID) (driver.Observation, error) {
	obs, _, err := d.observe(ctx, id)
	return obs, err
}

func (d *Driver) observe(_ context.Context, id home.VMID) (driver.Observation, *record, error) {
	if err := id.Validate(); err != nil {
		return driver.Observation{}, nil, err
	}
	vm := d.home.VM(id)
	obs := driver.Observation{State: driver.Stopped}
	if _, err := os.Stat(vm.Disk()); err == nil {
		obs.Provisioned = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return obs, nil, fmt.Errorf("observe %s: %w", id, err)
	}
	rec, err := readRecord(vm.QEMUJSON())
	if errors.Is(err, errNoRecord) {
		return obs, nil, nil
	}
	if err != nil {
		// Never STOPPED: a QEMU may still run on the disk, and a second one
		// would corrupt it.
		obs.State = driver.Error
		obs.Problem = fmt.Sprintf("%v; a QEMU may still be running on this disk: check `pgrep -af %s`, stop it by hand if it runs, then remove %s", err, vm.QEMUName(), vm.QEMUJSON())
		obs.LogTail = d.logTail(vm)
		return obs, nil, nil
	}
	obs.PID, obs.GuestPort, obs.Boot = rec.PID, rec.GuestPort, rec.Stamp
	obs.StartedAt, obs.GoldenImage, obs.RuntimeImage = rec.StartedAt, rec.GoldenImage, rec.RuntimeImage
	obs.CPUs, obs.MemoryMiB = rec.CPUs, rec.MemoryMiB
	now, err := d.boot()
	if err != nil {
		return obs, nil, fmt.Errorf("observe %s: %w", id, err)
	}
	if !now.SameBoot(rec.Stamp) {
		obs.StaleBoot = true
		return obs, &rec, nil
	}
	switch v, why := d.identify(rec); v {
	case ours, starting:
		obs.State = driver.Running
		if v == starting || !d.listens(rec) {
			// QEMU's user network listens on the guest port once QEMU
			// parsed its argv and set up networking, long before the
			// guest boots: one that does not is QEMU's problem, not the
			// guest's, and the reconciler kills it after ListenTimeout.
			obs.NotListening = true
			obs.LogTail = d.logTail(vm)
		}
	case gone:
		obs.Exited = true
		obs.LogTail = d.logTail(vm)
		last := lastStartLog(vm)
		obs.PortTaken = strings.Contains(last, portTakenMessage)
		if f, ok := hostfix.ForQEMULog(last); ok {
			obs.Fix = f.String()
		}
		if strings.Contains(last, diskLockedMessage) {
			// A QEMU without a record (an agent killed between the spawn
			// and qemu.json) still runs on this disk; QEMU's own image lock
			// kept a second one off it.
			obs.LogTail += fmt.Sprintf("\nanother QEMU holds the disk: find it with `pgrep -af %s` and stop it", vm.QEMUName())
		}
		d.mu.Lock()
		if e, ok := d.exits[id]; ok && e.pid == rec.PID && e.startTicks == rec.ProcStartTicks {
			obs.ExitStatus = e.status
		}
		d.mu.Unlock()
	default:
		obs.State = driver.Error
		obs.Problem = fmt.Sprintf("%s: it cannot be proven to be this VM's QEMU, so it is neither killed nor started over; check `ps -o user,args -p %d`, stop it by hand if it is this VM's QEMU, then remove %s", why, rec.PID, vm.QEMUJSON())
		obs.LogTail = d.logTail(vm)
	}
	return obs, &rec, nil
}

// Health implements driver.GuestChannel.
func (d *Driver) Health(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error) {
	obs, rec, err := d.observe(ctx, id)
	if err != nil {
		return protocol.HealthResponse{}, err
	}
	if obs.State != driver.Running {
		return protocol.HealthResponse{}, fmt.Errorf("health of %s: %w (state %s)", id, driver.ErrNotRunning, obs.State)
	}
	t, err := targetOf(*rec, token)
	if err != nil {
		return protocol.HealthResponse{}, fmt.Errorf("health of %s: %w", id, err)
	}
	return d.guest.Health(ctx, t)
}

// GuestTarget implements driver.GuestChannel: the record of this boot, read
// without probing the process or the port (the listener rule does, on
// every new connection).
func (d *Driver) GuestTarget(_ context.Context, id home.VMID, token string) (guestclient.Target, error) {
	if err := id.Validate(); err != nil {
		return guestclient.Target{}, err
	}
	rec, err := readRecord(d.home.VM(id).QEMUJSON())
	if errors.Is(err, errNoRecord) {
		return guestclient.Target{}, fmt.Errorf("guest of %s: %w (no qemu.json)", id, driver.ErrNotRunning)
	}
	if err != nil {
		return guestclient.Target{}, fmt.Errorf("guest of %s: the VM's record cannot be read: %w", id, err)
	}
	now, err := d.boot()
	if err != nil {
		return guestclient.Target{}, fmt.Errorf("guest of %s: %w", id, err)
	}
	if !now.SameBoot(rec.Stamp) {
		return guestclient.Target{}, fmt.Errorf("guest of %s: %w (its record was written before the host restarted)", id, driver.ErrNotRunning)
	}
	t, err := targetOf(rec, token)
	if err != nil {
		return guestclient.Target{}, fmt.Errorf("guest of %s: %w", id, err)
	}
	return t, nil
}

// targetOf is the one place a VM's record becomes a guest target: the pid
// with its start time and boot id, since a pid alone is not the QEMU's
// identity (the kernel hands it on). A record without them (one whose
// spawn could not read the start time) is refused rather than proved with
// less.
func targetOf(rec record, token string) (guestclient.Target, error) {
	if rec.ProcStartTicks == 0 || rec.BootID == "" {
		return guestclient.Target{}, fmt.Errorf("%w: the record of QEMU pid %d does not give its start time and boot id", guestclient.ErrGuestUnproven, rec.PID)
	}
	return guestclient.Target{Port: rec.GuestPort, PID: rec.PID, Token: token, StartTicks: rec.ProcStartTicks, BootID: rec.BootID}, nil
}

// validateSpec checks what a start needs before anything is written.
func (d *Driver) validateSpec(spec driver.Spec) error {
	if err := spec.ID.Validate(); err != nil {
		return err
	}
	if spec.CPUs < 1 || spec.CPUs > 255 {
		return fmt.Errorf("start %s: cpus %d is not between 1 and 255", spec.ID, spec.CPUs)
	}
	if spec.MemoryMiB < 64 {
		return fmt.Errorf("start %s: memory %d MiB is below 64 MiB", spec.ID, spec.MemoryMiB)
	}
	return nil
}

// Start implements driver.Lifecycle.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (driver.Observation, error) {
	if err := d.validateSpec(spec); err != nil {
		return driver.Observation{}, err
	}
	unlock := d.lock(spec.ID)
	defer unlock()
	obs, _, err := d.observe(ctx, spec.ID)
	if err != nil {
		return obs, err
	}
	switch obs.State {
	case driver.Running:
		return obs, nil
	case driver.Error:
		return obs, fmt.Errorf("start %s: %w: %s", spec.ID, driver.ErrVMError, obs.Problem)
	}
	vm := d.home.VM(spec.ID)
	for _, dir := range []string{vm.Dir, d.home.Logs()} {
		if err := d.home.NoteWrite(dir, os.MkdirAll(dir, home.PrivateDirMode)); err != nil {
			return obs, d.startFailed(spec.ID, err)
		}
	}
	golden, err := d.ensureDisk(ctx, vm, spec)
	if err != nil {
		return obs, d.startFailed(spec.ID, err)
	}
	runtime, err := d.runtimeFor(spec)
	if err != nil {
		return obs, d.startFailed(spec.ID, err)
	}
	m, err := d.machineFor(vm, spec.CPUs, spec.MemoryMiB, golden, runtime)
	if err != nil {
		return obs, d.startFailed(spec.ID, err)
	}
	gcfg := protocol.GuestConfig{DotID: spec.ID.Namespace + "/" + spec.ID.Name, Token: spec.Token, Hostname: spec.ID.Name}
	env := protocol.EngineEnv{OpenRouterURL: d.cfg.EffectiveOpenRouterURL(), ExitEchoURLs: d.cfg.ExitEchoURLs}
	if _, err := writeSeed(vm.Seed(), spec.ID, gcfg, env); d.home.NoteWrite(vm.Seed(), err) != nil {
		return obs, d.startFailed(spec.ID, fmt.Errorf("write the seed: %w", err))
	}
	port, err := d.pickPort()
	if err != nil {
		return obs, d.startFailed(spec.ID, err)
	}
	m.GuestPort = port
	if err := d.spawn(vm, m, golden, runtime); err != nil {
		return obs, d.startFailed(spec.ID, err)
	}
	o, _, err := d.observe(ctx, spec.ID)
	return o, err
}

// startFailed is the error of a start that failed. One the disk refused says
// so first, with what to do: nothing of the start is left half-written (each
// record is written whole or not at all), and the start succeeds once there
// is room again.
func (d *Driver) startFailed(id home.VMID, err error) error {
	if home.DiskFull(err) {
		return fmt.Errorf("start %s: the disk is full: %w; fix: %s", id, err, d.home.DiskFullFix())
	}
	return fmt.Errorf("start %s: %w", id, err)
}

// runtimeFor is the runtime image a start uses: the spec's, else the newest
// registered.
func (d *Driver) runtimeFor(spec driver.Spec) (string, error) {
	if spec.RuntimeImage != "" {
		return spec.RuntimeImage, nil
	}
	img, err := images.Latest(d.home, home.Runtime)
	if err != nil {
		return "", err
	}
	return img.Version, nil
}

// Poweroff implements driver.GuestChannel (ref 3.4): the guest is asked, and the
// caller watches for QEMU's exit.
func (d *Driver) Poweroff(ctx context.Context, id home.VMID, token string) error {
	obs, rec, err := d.observe(ctx, id)
	if err != nil {
		return err
	}
	if obs.State != driver.Running {
		return fmt.Errorf("poweroff %s: %w (state %s)", id, driver.ErrNotRunning, obs.State)
	}
	if token == "" {
		return fmt.Errorf("poweroff %s: no guest token", id)
	}
	t, err := targetOf(*rec, token)
	if err != nil {
		return fmt.Errorf("poweroff %s: %w", id, err)
	}
	return d.guest.Poweroff(ctx, t)
}

// PrepareSleep implements driver.SleepPreparer.
func (d *Driver) PrepareSleep(ctx context.Context, id home.VMID, token string) error {
	obs, rec, err := d.observe(ctx, id)
	if err != nil {
		return err
	}
	if obs.State != driver.Running {
		return fmt.Errorf("prepare-sleep %s: %w (state %s)", id, driver.ErrNotRunning, obs.State)
	}
	t, err := targetOf(*rec, token)
	if err != nil {
		return fmt.Errorf("prepare-sleep %s: %w", id, err)
	}
	return d.guest.Agent(ctx, t, http.MethodPost, protocol.RoutePrepareSleep, nil, nil)
}

// Kill implements driver.Lifecycle: SIGKILL under the kill rule, a short wait,
// and the record cleared once the process is gone.
func (d *Driver) Kill(ctx context.Context, id home.VMID) (driver.KillResult, error) {
	if err := id.Validate(); err != nil {
		return driver.KillResult{}, err
	}
	unlock := d.lock(id)
	defer unlock()
	vm := d.home.VM(id)
	obs, rec, err := d.observe(ctx, id)
	if err != nil {
		return driver.KillResult{}, err
	}
	res := driver.KillResult{WasRunning: obs.State == driver.Running}
	switch obs.State {
	case driver.Error:
		return res, fmt.Errorf("kill %s: %w: %s", id, driver.ErrVMError, obs.Problem)
	case driver.Running:
		if err := d.kill(*rec); err != nil {
			return res, fmt.Errorf("kill %s: %w", id, err)
		}
		if !d.waitGone(ctx, *rec, d.KillWait) {
			return res, nil // not gone yet: the next look sees it go
		}
	}
	// A record whose process is gone, or which is from another boot, is
	// cleared, so a pid recycled later cannot make it look alive.
	if rec != nil {
		d.guest.Forget(guestclient.Target{Port: rec.GuestPort, PID: rec.PID})
		if err := os.Remove(vm.QEMUJSON()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("kill %s: %w", id, err)
		}
	}
	res.Gone = true
	return res, nil
}

// Destroy implements driver.Lifecycle: kill without a poweroff, then remove the
// VM's directory and log.
func (d *Driver) Destroy(ctx context.Context, id home.VMID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	unlock := d.lock(id)
	defer unlock()
	vm := d.home.VM(id)
	obs, rec, err := d.observe(ctx, id)
	if err != nil {
		return err
	}
	switch obs.State {
	case driver.Error:
		return fmt.Errorf("destroy %s: %w: %s", id, driver.ErrVMError, obs.Problem)
	case driver.Running:
		if err := d.kill(*rec); err != nil {
			return fmt.Errorf("destroy %s: %w", id, err)
		}
		if !d.waitGone(ctx, *rec, d.KillWait) {
			return fmt.Errorf("destroy %s: qemu pid %d was killed: %w", id, rec.PID, driver.ErrStillRunning)
		}
		d.guest.Forget(guestclient.Target{Port: rec.GuestPort, PID: rec.PID})
	}
	if err := os.RemoveAll(vm.Dir); err != nil {
		return fmt.Errorf("destroy %s: remove %s: %w", id, vm.Dir, err)
	}
	if err := os.Remove(vm.QEMULog()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	// The namespace's directory goes with its last VM (fails harmlessly when
	// another VM is in it).
	_ = os.Remove(filepath.Dir(vm.Dir))
	return nil
}
