package qemu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// portTakenMessage is what QEMU prints when the guest port was taken between
// picking it and QEMU binding it (ref 3.4, measured); the start retries.
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
		return strings.Contains(log, portTakenMessage), fmt.Errorf("qemu %s%s; its log %s says: %s%s", what, status, vm.QEMULog(), cmp.Or(log, "(nothing)"), hint)
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
