package e2e

import (
	"os"
	"syscall"
	"testing"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

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
