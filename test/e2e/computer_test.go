package e2e

// The Computer reconciler against real QEMU: the real binary (`invisible-dots
// server`) on a fresh home with the test image registered, driven through
// kubectl and `invisible-dots computer`. It runs the test image under tcg:
// the home's config/host.yaml says `accelerator: tcg`, because KVM on these
// build machines opens but hangs a Linux kernel at entry (DESIGN.md 5); tcg is
// never chosen automatically, so the test writes it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// vmReadyTimeout bounds apply-to-Ready under tcg on a shared 2-core machine.
const vmReadyTimeout = 4 * time.Minute

func TestComputerRealVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM under QEMU")
	}
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		t.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	// The test image (a Debian cloud kernel and a busybox initramfs with our
	// dot-agentd), registered as the home's newest images, and tcg,
	// explicitly: see the file comment.
	h := vmHome(t)

	name := "e2e-vm"
	vm := h.VM(home.VMID{Namespace: "default", Name: name})
	// A failed run leaves no QEMU behind: the one in this home's record is
	// killed (its command line names this VM's directory, so it is ours).
	// Registered first, so it runs after the servers' own cleanups.
	t.Cleanup(func() { cvmKillRecorded(vm) })
	srv := startServer(t, h.Root)
	k := cvmKubectl{t: t, s: srv}

	k.apply(smallDot(name, ""))

	t.Log("apply a Dot: its Computer reaches RUNNING and Ready")
	start := time.Now()
	c := k.waitComputer(name, vmReadyTimeout, runningReady)
	t.Logf("FIGURE apply-to-Ready %s (tcg), QEMU pid %d, guest port %d", time.Since(start).Round(time.Millisecond), c.Status.PID, c.Status.GuestPort)
	if n := cvmCountQEMU(vm); n != 1 {
		t.Fatalf("%d QEMU processes for %s; want 1", n, vm.QEMUName())
	}
	t.Logf("FIGURE host memory of the idle VM: QEMU RSS %d MiB", cvmRSSMiB(int(c.Status.PID)))

	t.Log("kubectl stop: the guest powers itself off (QEMU exits by itself, not killed)")
	pid := int(c.Status.PID)
	start = time.Now()
	k.run("patch", "computer", name, "--type", "merge", "-p", `{"spec":{"runStrategy":"Halted"}}`)
	k.waitComputer(name, 2*time.Minute, func(c *dotsv1.Computer) bool {
		return c.Status.State == dotsv1.ComputerStopped && c.Status.StopReason == dotsv1.StopUser
	})
	t.Logf("FIGURE stop-to-STOPPED %s (tcg)", time.Since(start).Round(time.Millisecond))
	if cvmAlive(pid) {
		t.Errorf("QEMU pid %d still runs after STOPPED", pid)
	}
	k.waitEvent(name, "the guest powered itself off")

	t.Log("invisible-dots computer start: RUNNING and Ready again")
	cvmRun(t, repoRoot, []string{"INVISIBLE_DOTS_HOME=" + h.Root}, binary, "computer", "start", name)
	c = k.waitComputer(name, vmReadyTimeout, runningReady)

	t.Log("invisible-dots computer reboot: a new QEMU, once")
	pid = int(c.Status.PID)
	cvmRun(t, repoRoot, []string{"INVISIBLE_DOTS_HOME=" + h.Root}, binary, "computer", "reboot", name)
	c = k.waitComputer(name, vmReadyTimeout, func(c *dotsv1.Computer) bool {
		return runningReady(c) && int(c.Status.PID) != pid && c.Status.HandledRebootRequest != ""
	})
	if cvmAlive(pid) {
		t.Errorf("the QEMU before the reboot (pid %d) still runs", pid)
	}

	t.Log("under Always, kill -9 of QEMU is noticed and repaired")
	k.run("patch", "computer", name, "--type", "merge", "-p", `{"spec":{"runStrategy":"Always"}}`)
	pid = int(c.Status.PID)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	c = k.waitComputer(name, vmReadyTimeout, func(c *dotsv1.Computer) bool {
		return runningReady(c) && int(c.Status.PID) != pid
	})
	if n := cvmCountQEMU(vm); n != 1 {
		t.Fatalf("%d QEMU processes after the repair; want 1", n)
	}
	k.waitEvent(name, "QEMU exited without a stop being asked")

	t.Log("kill -9 of the server, then a restart, adopts the running VM without a second QEMU")
	pid = int(c.Status.PID)
	cvmKillServer(t, srv, h)
	if !cvmAlive(pid) {
		t.Fatalf("QEMU pid %d died with the server; it must outlive it", pid)
	}
	srv = startServer(t, h.Root)
	k = cvmKubectl{t: t, s: srv}
	k.waitComputer(name, 2*time.Minute, func(c *dotsv1.Computer) bool {
		return runningReady(c) && c.Status.ObservedGeneration == c.Generation
	})
	// Let the new server's first reconciles settle, then count.
	time.Sleep(3 * time.Second)
	c = k.getComputer(name)
	if int(c.Status.PID) != pid || cvmCountQEMU(vm) != 1 {
		t.Fatalf("after the server's restart: pid %d (was %d), %d QEMU processes; want the same one, alone", c.Status.PID, pid, cvmCountQEMU(vm))
	}

	t.Log("a faked host reboot (server and QEMU gone, qemu.json from another boot) brings the Always Computer back")
	cvmKillServer(t, srv, h)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	cvmWaitGone(t, pid)
	cvmRewriteBootID(t, vm.QEMUJSON())
	srv = startServer(t, h.Root)
	k = cvmKubectl{t: t, s: srv}
	c = k.waitComputer(name, vmReadyTimeout, func(c *dotsv1.Computer) bool {
		return runningReady(c) && int(c.Status.PID) != pid
	})
	if c.Status.StopReason != "" {
		t.Errorf("stopReason %q after the start; want cleared", c.Status.StopReason)
	}
	k.waitEvent(name, "the host restarted")

	t.Log("deleting the Dot removes the VM and its directory")
	pid = int(c.Status.PID)
	k.run("delete", "dot", name, "--wait=true", "--timeout=120s")
	k.waitGone("computer", name, 2*time.Minute)
	if cvmAlive(pid) {
		t.Errorf("QEMU pid %d still runs after the Dot was deleted", pid)
	}
	if _, err := os.Stat(vm.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %v; want removed", vm.Dir, err)
	}
}

func runningReady(c *dotsv1.Computer) bool {
	if c.Status.State != dotsv1.ComputerRunning || c.Status.PID == 0 {
		return false
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == dotsv1.ReadyCondition {
			return cond.Status == "True"
		}
	}
	return false
}

// cvmKillServer is kill -9 of the server, as a crash. The managed
// PostgreSQL gets its parent-death signal and shuts itself down; this waits
// for it, because a server started while that postmaster is still shutting
// down fails on its socket lock (noted for the control plane: its restart
// could wait for it too).
func cvmKillServer(t testing.TB, s *server, h home.Layout) {
	t.Helper()
	pm := 0
	if b, err := os.ReadFile(filepath.Join(h.DB(), "postmaster.pid")); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		pm, _ = strconv.Atoi(strings.TrimSpace(first))
	}
	s.kill9()
	if pm > 0 {
		cvmWaitGone(t, pm)
	}
}

// cvmKubectl runs kubectl in namespace default of a server.
type cvmKubectl struct {
	t testing.TB
	s *server
}

func (k cvmKubectl) run(args ...string) string {
	k.t.Helper()
	out, err := k.try(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (k cvmKubectl) try(args ...string) (string, error) {
	return k.s.kubectl(append([]string{"-n", "default"}, args...)...)
}

func (k cvmKubectl) apply(manifest string) {
	k.t.Helper()
	f := filepath.Join(k.t.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		k.t.Fatal(err)
	}
	k.run("apply", "-f", f)
}

func (k cvmKubectl) getComputer(name string) *dotsv1.Computer {
	k.t.Helper()
	c := &dotsv1.Computer{}
	if err := json.Unmarshal([]byte(k.run("get", "computer", name, "-o", "json")), c); err != nil {
		k.t.Fatal(err)
	}
	return c
}

// waitComputer polls the Computer until ok, and fails with its status and
// Events when the timeout passes.
func (k cvmKubectl) waitComputer(name string, timeout time.Duration, ok func(*dotsv1.Computer) bool) *dotsv1.Computer {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := k.try("get", "computer", name, "-o", "json")
		c := &dotsv1.Computer{}
		if err == nil && json.Unmarshal([]byte(out), c) == nil && ok(c) {
			return c
		}
		if time.Now().After(deadline) {
			ev, _ := k.try("get", "events", "--field-selector", "involvedObject.name="+name)
			k.t.Fatalf("Computer %s did not get there within %s; last:\n%s\nevents:\n%s", name, timeout, out, ev)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitEvent waits up to 30 s for an Event of the Computer whose message
// holds want (the recorder sends Events asynchronously).
func (k cvmKubectl) waitEvent(name, want string) {
	k.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := k.try("get", "events", "--field-selector", "involvedObject.name="+name+",involvedObject.kind=Computer",
			"-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
		if strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			k.t.Errorf("no Event of Computer %s says %q; its Events:\n%s", name, want, out)
			return
		}
		time.Sleep(time.Second)
	}
}

func (k cvmKubectl) waitGone(kind, name string, timeout time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := k.try("get", kind, name, "-o", "name")
		if err != nil && strings.Contains(out, "NotFound") {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("%s %s still there after %s: %s", kind, name, timeout, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func cvmRun(t testing.TB, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func cvmAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is gone for our purpose.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func cvmWaitGone(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for cvmAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still there 60 s after it was killed", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cvmCountQEMU counts the live processes started with the VM's -name.
func cvmCountQEMU(vm home.VM) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-name" && strings.HasPrefix(args[i+1], vm.QEMUName()) && cvmAlive(pid) {
				n++
				break
			}
		}
	}
	return n
}

// cvmRewriteBootID makes qemu.json a record of another boot, as after a host
// restart (the processes are gone already).
func cvmRewriteBootID(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("qemu.json: %v", err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["boot_id"] = "00000000-0000-0000-0000-000000000000"
	b, err = json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// cvmKillRecorded kills the QEMU of the VM's qemu.json when its command line
// names the VM's own directory.
func cvmKillRecorded(vm home.VM) {
	b, err := os.ReadFile(vm.QEMUJSON())
	if err != nil {
		return
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if json.Unmarshal(b, &rec) != nil || rec.PID <= 0 {
		return
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", rec.PID))
	if err != nil || !strings.Contains(string(cmdline), vm.Dir) {
		return
	}
	_ = syscall.Kill(rec.PID, syscall.SIGKILL)
}

// cvmRSSMiB is a process's resident memory.
func cvmRSSMiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb / 1024
		}
	}
	return 0
}
