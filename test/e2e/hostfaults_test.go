package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// TestServerKilledBetweenSpawnAndRecord: the real server killed -9 (by its
// failpoint, crashpoint.Env) right after it spawned a Computer's QEMU and
// before it wrote qemu.json. The QEMU runs on with no record; the next
// server finds it by the start's pending record and adopts it: the
// Computer is RUNNING and Ready on that very QEMU, and no second QEMU is
// ever started on its disk.
func TestServerKilledBetweenSpawnAndRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM under QEMU")
	}
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		t.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	h := vmHome(t)
	name := "spawn-crash"
	vm := h.VM(home.VMID{Namespace: "default", Name: name})
	t.Cleanup(func() {
		cvmKillRecorded(vm)
		if pid := cvmQEMUOf(vm); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	postmaster := func() int {
		b, err := os.ReadFile(filepath.Join(h.DB(), "postmaster.pid"))
		if err != nil {
			return 0
		}
		first, _, _ := strings.Cut(string(b), "\n")
		pid, _ := strconv.Atoi(strings.TrimSpace(first))
		return pid
	}
	srv := startServer(t, h.Root, crashpoint.Env+"="+crashpoint.QEMUSpawned)
	pm := postmaster()
	cvmKubectl{t: t, s: srv}.apply(smallDot(name, ""))
	if !srv.exited(2 * time.Minute) {
		t.Fatalf("the server did not die at %s", crashpoint.QEMUSpawned)
	}
	if pm > 0 {
		cvmWaitGone(t, pm)
	}
	if _, err := os.Stat(vm.QEMUJSON()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("qemu.json after a kill before it was written: %v", err)
	}
	if _, err := os.Stat(vm.StartPending()); err != nil {
		t.Fatalf("the start's pending record: %v", err)
	}
	orphan := cvmQEMUOf(vm)
	if orphan == 0 {
		t.Fatal("the QEMU spawned before the kill is not running")
	}

	srv = startServer(t, h.Root)
	k := cvmKubectl{t: t, s: srv}
	c := k.waitComputer(name, vmReadyTimeout, runningReady)
	if int(c.Status.PID) != orphan {
		t.Errorf("the Computer runs QEMU pid %d; want the one spawned before the kill, %d, adopted", c.Status.PID, orphan)
	}
	if n := cvmCountQEMU(vm); n != 1 {
		t.Errorf("%d QEMUs of %s; want the adopted one alone", n, vm.QEMUName())
	}
	if _, err := os.Stat(vm.StartPending()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pending record outlived the adoption: %v", err)
	}
}

// cvmQEMUOf is the pid of a live process started with the VM's -name, or 0.
func cvmQEMUOf(vm home.VM) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), "\x00-name\x00"+vm.QEMUName()+"\x00") && cvmAlive(pid) {
			return pid
		}
	}
	return 0
}

// TestHostRebootTwoVMs: two real VMs, one Always and one OnDemand with no
// work, through a faked host reboot (the server killed -9, every QEMU gone,
// every qemu.json of another boot): the Always Computer comes back RUNNING
// and Ready with a new QEMU, the other stays STOPPED with stop reason
// exited and no QEMU. The time from the restart to Ready is a figure.
func TestHostRebootTwoVMs(t *testing.T) {
	if testing.Short() {
		t.Skip("boots two VMs under QEMU")
	}
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		t.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	h := vmHome(t)
	always, idle := "reboot-always", "reboot-idle"
	vms := map[string]home.VM{}
	for _, name := range []string{always, idle} {
		vm := h.VM(home.VMID{Namespace: "default", Name: name})
		vms[name] = vm
		t.Cleanup(func() { cvmKillRecorded(vm) })
	}
	srv := startServer(t, h.Root)
	k := cvmKubectl{t: t, s: srv}
	for _, name := range []string{always, idle} {
		k.apply(smallDot(name, ""))
	}
	pids := map[string]int{}
	for _, name := range []string{always, idle} {
		c := k.waitComputer(name, vmReadyTimeout, runningReady)
		pids[name] = int(c.Status.PID)
	}
	k.run("patch", "computer", always, "--type", "merge", "-p", `{"spec":{"runStrategy":"Always"}}`)
	k.waitComputer(always, time.Minute, func(c *dotsv1.Computer) bool {
		return c.Spec.RunStrategy == dotsv1.RunAlways && c.Status.ObservedGeneration == c.Generation
	})

	t.Log("the host restarts: server and QEMUs gone, qemu.json of another boot")
	cvmKillServer(t, srv, h)
	for name, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 QEMU %d of %s: %v", pid, name, err)
		}
		cvmWaitGone(t, pid)
		cvmRewriteBootID(t, vms[name].QEMUJSON())
	}
	start := time.Now()
	srv = startServer(t, h.Root)
	k = cvmKubectl{t: t, s: srv}
	c := k.waitComputer(always, vmReadyTimeout, func(c *dotsv1.Computer) bool {
		return runningReady(c) && int(c.Status.PID) != pids[always]
	})
	took := time.Since(start)
	stopped := k.waitComputer(idle, time.Minute, func(c *dotsv1.Computer) bool {
		return c.Status.State == dotsv1.ComputerStopped
	})
	if stopped.Status.StopReason != dotsv1.StopExited {
		t.Errorf("the OnDemand Computer without work: stopReason %q; want %q", stopped.Status.StopReason, dotsv1.StopExited)
	}
	// It stays down: nothing asks for it.
	time.Sleep(5 * time.Second)
	if got := k.getComputer(idle); got.Status.State != dotsv1.ComputerStopped || cvmCountQEMU(vms[idle]) != 0 {
		t.Errorf("the OnDemand Computer without work: state %s, %d QEMUs; want STOPPED and none", got.Status.State, cvmCountQEMU(vms[idle]))
	}
	if n := cvmCountQEMU(vms[always]); n != 1 {
		t.Errorf("%d QEMUs of the Always Computer; want 1", n)
	}
	k.waitEvent(always, "the host restarted")
	t.Logf("FIGURE host reboot, 2 real VMs (tcg): the Always Computer RUNNING and Ready %s after the server's start (pid %d), 1 of 1 back (100 %%), the OnDemand one without work STOPPED (%s)",
		took.Round(time.Millisecond), c.Status.PID, stopped.Status.StopReason)
}
