package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// portTakenMessage is what QEMU prints when the guest port was taken between
// picking it and QEMU binding it (ref 3.4, measured): the start is tried
// again (Observation.PortTaken).
const portTakenMessage = "Could not set up host forwarding rule"

// maxQEMULog is the size past which QEMU's log is started over at a start.
const maxQEMULog = 1 << 20

// diskLockedMessage is QEMU's refusal to open a disk another QEMU has open.
const diskLockedMessage = "Failed to get \"write\" lock"

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
	// listened: its guest port accepted a connection once; QEMU listens on
	// it from then until it exits, so it is not asked again.
	listened atomic.Bool
}

// listens says whether a running record's QEMU listens on its guest port.
// A QEMU of another process was proven by its listening port already; one
// this driver spawned is asked until it first accepts.
func (d *Driver) listens(rec record) bool {
	c := d.childOf(rec.PID)
	if c == nil || c.startTicks != rec.ProcStartTicks {
		return true
	}
	if c.listened.Load() {
		return true
	}
	if portAccepts(rec.GuestPort) {
		c.listened.Store(true)
		return true
	}
	return false
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (d *Driver) childOf(pid int) *child {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.children[pid]
}

// machineFor resolves the images and builds the machine (without its port).
func (d *Driver) machineFor(vm home.VM, cpus int, memoryMiB int64, golden, runtime string) (machine, error) {
	gimg, err := images.Get(d.home, home.Golden, golden)
	if err != nil {
		return machine{}, err
	}
	gman, err := gimg.Manifest()
	if err != nil {
		return machine{}, err
	}
	rimg, err := images.Get(d.home, home.Runtime, runtime)
	if err != nil {
		return machine{}, err
	}
	m := machine{
		Binary: d.bin.System, Name: vm.QEMUName(),
		Accelerator: d.cfg.EffectiveAccelerator(), CPUModel: d.cfg.EffectiveCPUModel(),
		CPUs: cpus, MemoryMiB: memoryMiB,
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

// startMarker begins each start's part of QEMU's log.
const startMarker = "=== "

// spawn starts QEMU detached and writes its record; it does not wait for
// the guest port. What QEMU says if it exits at once is read back by
// Observe from its log.
func (d *Driver) spawn(vm home.VM, m machine, golden, runtime string) error {
	args := qemuArgs(m)
	if f := hasForbiddenFlag(args); f != "" {
		return fmt.Errorf("internal: qemu argv holds the forbidden flag %s", f)
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if fi, err := os.Stat(vm.QEMULog()); err == nil && fi.Size() > maxQEMULog {
		// The log keeps earlier starts for the person reading it, up to a
		// size; then it starts over.
		flags |= os.O_TRUNC
	}
	logf, err := os.OpenFile(vm.QEMULog(), flags, home.PrivateFileMode)
	if err != nil {
		return fmt.Errorf("open %s: %w", vm.QEMULog(), err)
	}
	fmt.Fprintf(logf, "%s%s start, guest port %d ===\n", startMarker, time.Now().UTC().Format(time.RFC3339), m.GuestPort)
	stamp, err := d.boot()
	if err != nil {
		logf.Close()
		return err
	}
	rec := record{
		GuestPort: m.GuestPort, Stamp: stamp, StartedAt: time.Now().UTC(), QEMU: d.bin.System,
		GoldenImage: golden, RuntimeImage: runtime, CPUs: m.CPUs, MemoryMiB: m.MemoryMiB,
	}
	// Create pending, before QEMU exists (crossplane's
	// SetExternalCreatePending): an agent killed between the spawn and
	// qemu.json leaves this, and the next driver on the home finds that
	// QEMU by it (recoverStarts) instead of leaving it running unrecorded.
	if err := d.home.NoteWrite(vm.StartPending(), writeRecord(vm.StartPending(), rec)); err != nil {
		logf.Close()
		return err
	}
	cmd := &exec.Cmd{
		Path:   args[0],
		Args:   args,
		Env:    allowlistedEnvironment(d.environ()),
		Dir:    d.home.Root,
		Stdout: logf,
		Stderr: logf,
		// Its own session: QEMU outlives the agent and is not hit by the
		// terminal's signals (Ctrl+C stops the server, not the Dots).
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	startErr := cmd.Start()
	logf.Close()
	if startErr != nil {
		_ = os.Remove(vm.StartPending())
		return fmt.Errorf("spawn %s: %w", args[0], startErr)
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

	crashpoint.Hit(crashpoint.QEMUSpawned)
	rec.PID, rec.ProcStartTicks, rec.StartedAt = c.pid, c.startTicks, time.Now().UTC()
	if err := d.home.NoteWrite(vm.QEMUJSON(), writeRecord(vm.QEMUJSON(), rec)); err != nil {
		// Without its record the QEMU could not be told from a stranger:
		// it goes now, while it is provably ours.
		d.killChild(c)
		if c.exited() {
			_ = os.Remove(vm.StartPending())
		}
		return err
	}
	// qemu.json is the truth from here; a pending record left beside it
	// (a kill right here) is dropped by the next start or recovery.
	_ = os.Remove(vm.StartPending())
	return nil
}

// lastStartLog is what QEMU wrote since its last start (up to 4 KiB).
func lastStartLog(vm home.VM) string {
	s := tail(vm.QEMULog(), 4096)
	if i := strings.LastIndex(s, startMarker); i >= 0 {
		return s[i:]
	}
	return s
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
	case <-time.After(d.KillWait):
	}
}
