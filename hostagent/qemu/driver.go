// Package qemu is the host agent's QEMU driver (ref 3): it provisions a VM's
// overlay and seed, spawns QEMU detached with one argv, records the process
// in qemu.json, and reads the VM's state back from that record, /proc and
// the guest port alone. QEMU has no monitor: it stops when the guest powers
// itself off, or when it is killed under the kill rule.
package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

var _ driver.Driver = (*Driver)(nil)

// portTakenMessage is what QEMU prints when the guest port was taken between
// picking it and QEMU binding it (ref 3.4, measured); the start retries.
const portTakenMessage = "Could not set up host forwarding rule"

// maxQEMULog is the size past which QEMU's log is started over at a start.
const maxQEMULog = 1 << 20

// diskLockedMessage is QEMU's refusal to open a disk another QEMU has open.
const diskLockedMessage = "Failed to get \"write\" lock"

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

	// Timeouts of ref 3.4; tests shorten them.
	ListenTimeout time.Duration // QEMU must listen on the guest port within this
	AliveCheck    time.Duration // and still run this long after
	PoweroffGrace time.Duration // a guest that accepted poweroff has this long
	KillGrace     time.Duration // a killed QEMU must be gone within this
	PoweroffCall  time.Duration // the poweroff request itself
	StartAttempts int           // tries when QEMU reports the port taken
	pollInterval  time.Duration
	// pickPort is freePort; a test hands out a taken port first.
	pickPort func() (int, error)

	mu       sync.Mutex
	vmLocks  map[home.VMID]*sync.Mutex
	children map[int]*child
	// exits keeps how the last QEMU this process spawned for a VM ended.
	exits map[home.VMID]exitInfo
}

// exitInfo is how a spawned QEMU ended.
type exitInfo struct {
	pid        int
	startTicks uint64
	status     string
}

// child is a QEMU this process spawned. Until its Wait returned, its pid
// cannot be recycled, so it may be killed without the port check (the first
// half of the kill rule).
type child struct {
	id         home.VMID
	pid        int
	startTicks uint64
	done       chan struct{}
	state      *os.ProcessState
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// New returns a driver for a home. It finds QEMU and refuses one older than
// hostconfig.MinQEMU and a home QEMU cannot be given.
func New(ctx context.Context, o Options) (*Driver, error) {
	if err := home.QEMUPathProblem(o.Home.Root); err != nil {
		return nil, err
	}
	d := &Driver{
		home: o.Home, bin: o.Binaries, boot: o.Boot, guest: o.Guest, environ: o.Environ,
		ListenTimeout: 30 * time.Second, AliveCheck: time.Second,
		PoweroffGrace: 60 * time.Second, KillGrace: 10 * time.Second, PoweroffCall: 15 * time.Second,
		StartAttempts: 5, pollInterval: 50 * time.Millisecond, pickPort: freePort,
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
	if d.boot == nil {
		d.boot = home.CurrentBoot
	}
	if d.guest == nil {
		d.guest = guestclient.New()
	}
	if d.environ == nil {
		d.environ = os.Environ
	}
	return d, nil
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

func (d *Driver) childOf(pid int) *child {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.children[pid]
}

// verdict is what the host can prove about a record's process.
type verdict int

const (
	gone     verdict = iota // no such process (or another one now holds the pid)
	ours                    // this VM's QEMU: the kill rule holds
	unproven                // alive, but not provably this VM's QEMU
)

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

// Observe implements driver.Driver. It reads qemu.json, /proc and the guest
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
	case ours:
		obs.State = driver.Running
	case gone:
		obs.Exited = true
		obs.LogTail = d.logTail(vm)
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

// Health implements driver.Driver.
func (d *Driver) Health(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error) {
	obs, _, err := d.observe(ctx, id)
	if err != nil {
		return protocol.HealthResponse{}, err
	}
	if obs.State != driver.Running {
		return protocol.HealthResponse{}, fmt.Errorf("health of %s: %w (state %s)", id, driver.ErrNotRunning, obs.State)
	}
	return d.guest.Health(ctx, guestclient.Target{Port: obs.GuestPort, PID: obs.PID, Token: token})
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
	if spec.RuntimeImage == "" {
		return fmt.Errorf("start %s: no runtime image named (register one: make test-image, or invisible-dots image build)", spec.ID)
	}
	return nil
}

// Start implements driver.Driver.
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
		if err := os.MkdirAll(dir, home.PrivateDirMode); err != nil {
			return obs, fmt.Errorf("start %s: %w", spec.ID, err)
		}
	}
	golden, err := d.ensureDisk(ctx, vm, spec)
	if err != nil {
		return obs, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	m, err := d.machineFor(vm, spec, golden)
	if err != nil {
		return obs, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	gcfg := protocol.GuestConfig{DotID: spec.ID.Namespace + "/" + spec.ID.Name, Token: spec.Token, Hostname: spec.ID.Name}
	if _, err := writeSeed(vm.Seed(), spec.ID, gcfg); err != nil {
		return obs, fmt.Errorf("start %s: write the seed: %w", spec.ID, err)
	}
	attempts := d.StartAttempts
	if attempts < 1 {
		attempts = 1
	}
	var lastErr error
	for i := 0; i < attempts; i++ {
		port, err := d.pickPort()
		if err != nil {
			return obs, err
		}
		m.GuestPort = port
		retry, err := d.spawnAndWait(ctx, vm, m, golden, spec.RuntimeImage)
		if err == nil {
			o, _, err := d.observe(ctx, spec.ID)
			return o, err
		}
		lastErr = err
		if !retry {
			break
		}
	}
	return obs, fmt.Errorf("start %s: %w", spec.ID, lastErr)
}

// ensureDisk creates the overlay on first use and returns the golden image
// version it sits on.
func (d *Driver) ensureDisk(ctx context.Context, vm home.VM, spec driver.Spec) (string, error) {
	if _, err := os.Stat(vm.Disk()); err == nil {
		return d.backingVersion(ctx, vm.Disk())
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if spec.GoldenImage == "" {
		return "", fmt.Errorf("no golden image named for the new disk (register one: make test-image, or invisible-dots image build)")
	}
	img, err := images.Get(d.home, home.Golden, spec.GoldenImage)
	if err != nil {
		return "", err
	}
	if err := home.QEMUPathProblem(img.File); err != nil {
		return "", err
	}
	// qemu-img writes the overlay itself, so it is made under a temporary
	// name and renamed into place here rather than written through renameio,
	// which only replaces files this process writes.
	tmp := filepath.Join(vm.Dir, ".disk.qcow2.creating")
	_ = os.Remove(tmp)
	args := []string{"create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", img.File, tmp}
	if spec.DiskBytes > 0 {
		args = append(args, fmt.Sprintf("%d", spec.DiskBytes))
	}
	if out, err := d.runImg(ctx, args...); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("create the overlay on %s: %w: %s", filepath.Base(img.File), err, strings.TrimSpace(out))
	}
	if err := os.Chmod(tmp, home.PrivateFileMode); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, vm.Disk()); err != nil {
		return "", fmt.Errorf("create the overlay: %w", err)
	}
	return spec.GoldenImage, nil
}

func (d *Driver) runImg(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin.Img, args...)
	cmd.Env = allowlistedEnvironment(d.environ())
	cmd.Dir = d.home.Root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// backingVersion reads which golden image an existing overlay sits on.
func (d *Driver) backingVersion(ctx context.Context, disk string) (string, error) {
	// -U: a running QEMU holds the image's lock; info only reads.
	out, err := d.runImg(ctx, "info", "-U", "--output=json", disk)
	if err != nil {
		return "", fmt.Errorf("read the overlay %s: %w: %s", disk, err, strings.TrimSpace(out))
	}
	var info struct {
		Backing string `json:"backing-filename"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return "", fmt.Errorf("read the overlay %s: %w", disk, err)
	}
	kind, version, ok := home.ParseImageFile(filepath.Base(info.Backing))
	if !ok || kind != home.Golden {
		return "", fmt.Errorf("the overlay %s sits on %q, not on a registered golden image: destroy the VM to make a new disk", disk, info.Backing)
	}
	return version, nil
}

// machineFor resolves the images and builds the machine (without its port).
func (d *Driver) machineFor(vm home.VM, spec driver.Spec, golden string) (machine, error) {
	gimg, err := images.Get(d.home, home.Golden, golden)
	if err != nil {
		return machine{}, err
	}
	gman, err := gimg.Manifest()
	if err != nil {
		return machine{}, err
	}
	rimg, err := images.Get(d.home, home.Runtime, spec.RuntimeImage)
	if err != nil {
		return machine{}, err
	}
	m := machine{
		Binary: d.bin.System, Name: vm.QEMUName(),
		Accelerator: d.cfg.EffectiveAccelerator(), CPUModel: d.cfg.EffectiveCPUModel(),
		CPUs: spec.CPUs, MemoryMiB: spec.MemoryMiB,
		Disk: vm.Disk(), Seed: vm.Seed(), Runtime: rimg.File, SerialLog: vm.SerialLog(),
	}
	if b := gman.Boot; b != nil {
		m.Kernel = filepath.Join(d.home.Images(), b.Kernel)
		m.Initrd = filepath.Join(d.home.Images(), b.Initrd)
		m.Append = b.Append
	}
	for _, p := range []string{m.Disk, m.Seed, m.Runtime, m.SerialLog, m.Kernel, m.Initrd} {
		if err := home.QEMUPathProblem(p); err != nil {
			return machine{}, err
		}
	}
	return m, nil
}

// spawnAndWait starts QEMU, records it, and waits until the guest port
// listens and QEMU still runs AliveCheck later. retry is true when QEMU
// reported the port taken.
func (d *Driver) spawnAndWait(ctx context.Context, vm home.VM, m machine, golden, runtime string) (retry bool, err error) {
	args := qemuArgs(m)
	if f := hasForbiddenFlag(args); f != "" {
		return false, fmt.Errorf("internal: qemu argv holds the forbidden flag %s", f)
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if fi, err := os.Stat(vm.QEMULog()); err == nil && fi.Size() > maxQEMULog {
		// The log keeps earlier starts for the person reading it, up to a
		// size; then it starts over.
		flags |= os.O_TRUNC
	}
	logf, err := os.OpenFile(vm.QEMULog(), flags, home.PrivateFileMode)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", vm.QEMULog(), err)
	}
	fmt.Fprintf(logf, "=== %s start, guest port %d ===\n", time.Now().UTC().Format(time.RFC3339), m.GuestPort)
	offset, _ := logf.Seek(0, 2)
	cmd := &exec.Cmd{
		Path:   args[0],
		Args:   args,
		Env:    allowlistedEnvironment(d.environ()),
		Dir:    d.home.Root,
		Stdout: logf,
		Stderr: logf,
		// Its own session: QEMU outlives the server and is not hit by the
		// terminal's signals (Ctrl+C stops the server, not the Dots).
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	startErr := cmd.Start()
	logf.Close()
	if startErr != nil {
		return false, fmt.Errorf("spawn %s: %w", args[0], startErr)
	}
	c := &child{id: vm.ID, pid: cmd.Process.Pid, done: make(chan struct{})}
	if info, err := readProc(c.pid); err == nil && info.Exists {
		c.startTicks = info.StartTicks
	}
	d.mu.Lock()
	d.children[c.pid] = c
	d.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		close(c.done)
		d.mu.Lock()
		if d.children[c.pid] == c {
			delete(d.children, c.pid)
		}
		if d.exits != nil && c.state != nil {
			d.exits[c.id] = exitInfo{pid: c.pid, startTicks: c.startTicks, status: c.state.String()}
		}
		d.mu.Unlock()
	}()

	stamp, err := d.boot()
	if err != nil {
		d.killChild(c)
		return false, err
	}
	rec := record{
		PID: c.pid, GuestPort: m.GuestPort, Stamp: stamp, ProcStartTicks: c.startTicks,
		StartedAt: time.Now().UTC(), QEMU: d.bin.System, GoldenImage: golden, RuntimeImage: runtime,
		CPUs: m.CPUs, MemoryMiB: m.MemoryMiB,
	}
	if err := writeRecord(vm.QEMUJSON(), rec); err != nil {
		d.killChild(c)
		return false, err
	}
	fail := func(what string) (bool, error) {
		d.killChild(c)
		_ = os.Remove(vm.QEMUJSON())
		log := readFrom(vm.QEMULog(), offset, 4096)
		status := ""
		if c.exited() && c.state != nil {
			status = " (" + c.state.String() + ")"
		}
		hint := ""
		if strings.Contains(log, diskLockedMessage) {
			// A QEMU without a record (a server killed between the spawn and
			// qemu.json) still runs on this disk; QEMU's own image lock kept
			// a second one off it.
			hint = fmt.Sprintf(" (another QEMU holds the disk: find it with `pgrep -af %s` and stop it)", vm.QEMUName())
		}
		return strings.Contains(log, portTakenMessage), fmt.Errorf("qemu %s%s; its log %s says: %s%s", what, status, vm.QEMULog(), orNothing(log), hint)
	}

	deadline := time.NewTimer(d.ListenTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(d.pollInterval)
	defer tick.Stop()
	for !portAccepts(m.GuestPort) {
		select {
		case <-c.done:
			return fail("exited before it listened on the guest port")
		case <-deadline.C:
			return fail(fmt.Sprintf("did not listen on guest port %d within %s and was killed", m.GuestPort, d.ListenTimeout))
		case <-ctx.Done():
			_, err := fail("start was cancelled")
			return false, errors.Join(ctx.Err(), err)
		case <-tick.C:
		}
	}
	// The second look catches what fails just after the network is up (QEMU
	// checks the CPU model when it builds the machine).
	select {
	case <-c.done:
		return fail("exited right after it listened")
	case <-time.After(d.AliveCheck):
	case <-ctx.Done():
		_, err := fail("start was cancelled")
		return false, errors.Join(ctx.Err(), err)
	}
	if c.exited() {
		return fail("exited right after it listened")
	}
	return false, nil
}

// killChild kills a QEMU this driver spawned during a failed start and reaps
// it. It is the first half of the kill rule: the process has not been waited
// for, so its pid is still its own.
func (d *Driver) killChild(c *child) {
	if !c.exited() {
		_ = syscall.Kill(c.pid, syscall.SIGKILL)
	}
	select {
	case <-c.done:
	case <-time.After(d.KillGrace):
	}
}

// Stop implements driver.Driver (ref 3.4): poweroff through the guest, up to
// PoweroffGrace for QEMU to exit by itself, then the kill rule and SIGKILL.
func (d *Driver) Stop(ctx context.Context, id home.VMID, token string) (driver.StopResult, error) {
	if err := id.Validate(); err != nil {
		return driver.StopResult{}, err
	}
	unlock := d.lock(id)
	defer unlock()
	return d.stop(ctx, id, token)
}

func (d *Driver) stop(ctx context.Context, id home.VMID, token string) (driver.StopResult, error) {
	vm := d.home.VM(id)
	obs, rec, err := d.observe(ctx, id)
	if err != nil {
		return driver.StopResult{}, err
	}
	switch obs.State {
	case driver.Error:
		return driver.StopResult{}, fmt.Errorf("stop %s: %w: %s", id, driver.ErrVMError, obs.Problem)
	case driver.Stopped:
		// A record whose process is gone or which is from another boot is
		// cleared, so a pid recycled later cannot make it look alive.
		if rec != nil {
			if err := os.Remove(vm.QEMUJSON()); err != nil && !errors.Is(err, os.ErrNotExist) {
				return driver.StopResult{}, fmt.Errorf("stop %s: %w", id, err)
			}
		}
		return driver.StopResult{}, nil
	}
	res := driver.StopResult{WasRunning: true}
	tgt := guestclient.Target{Port: rec.GuestPort, PID: rec.PID, Token: token}
	defer d.guest.Forget(tgt)
	poweredOff := false
	if token != "" {
		pctx, cancel := context.WithTimeout(ctx, d.PoweroffCall)
		err := d.guest.Poweroff(pctx, tgt)
		cancel()
		// A guest that does not accept the poweroff cannot power itself off:
		// it is killed at once.
		if err == nil && d.waitGone(ctx, *rec, d.PoweroffGrace) {
			poweredOff = true
		}
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("stop %s: %w", id, ctx.Err())
	}
	if poweredOff {
		res.PoweredOff = true
	} else {
		if err := d.kill(*rec); err != nil {
			return res, fmt.Errorf("stop %s: %w", id, err)
		}
		if !d.waitGone(ctx, *rec, d.KillGrace) {
			return res, fmt.Errorf("stop %s: qemu pid %d is still there %s after SIGKILL", id, rec.PID, d.KillGrace)
		}
		res.Killed = true
	}
	if err := os.Remove(vm.QEMUJSON()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("stop %s: %w", id, err)
	}
	return res, nil
}

// Reboot implements driver.Driver: a stop and a start, not a reset.
func (d *Driver) Reboot(ctx context.Context, spec driver.Spec) (driver.Observation, error) {
	if err := d.validateSpec(spec); err != nil {
		return driver.Observation{}, err
	}
	if _, err := d.Stop(ctx, spec.ID, spec.Token); err != nil {
		return driver.Observation{}, fmt.Errorf("reboot: %w", err)
	}
	return d.Start(ctx, spec)
}

// Destroy implements driver.Driver: kill without a poweroff, then remove the
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
		if !d.waitGone(ctx, *rec, d.KillGrace) {
			return fmt.Errorf("destroy %s: qemu pid %d is still there %s after SIGKILL", id, rec.PID, d.KillGrace)
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

// logTail is the end of QEMU's log and of the serial console.
func (d *Driver) logTail(vm home.VM) string {
	var b strings.Builder
	if s := tail(vm.QEMULog(), 1024); s != "" {
		b.WriteString("qemu: " + s)
	}
	if s := tail(vm.SerialLog(), 2048); s != "" {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString("serial: " + s)
	}
	return b.String()
}

// tail returns up to max bytes from the end of a file, from a line start.
func tail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - max
	if off < 0 {
		off = 0
	}
	s := readFrom(path, off, max)
	if off > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}

// readFrom reads up to max bytes of a file from offset.
func readFrom(path string, offset, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, max)
	n, _ := f.ReadAt(buf, offset)
	return strings.TrimSpace(string(buf[:n]))
}

func orNothing(s string) string {
	if s == "" {
		return "(nothing)"
	}
	return s
}
