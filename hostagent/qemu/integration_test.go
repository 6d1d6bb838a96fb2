package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// These tests run the real QEMU under tcg with a blank golden disk: the
// machine's firmware finds nothing to boot, but QEMU runs, listens on the
// guest port and is stopped, killed and destroyed for real. The guest side
// (health, a poweroff the guest performs) needs the test image: see
// image_integration_test.go.

const blankGolden = "20260101T000000Z-blank"
const blankRuntime = "20260101T000000Z-blank"

// realDriver returns a driver on a fresh home with a blank golden image and
// runtime ISO registered, or skips when QEMU is not installed.
func realDriver(t testing.TB) *Driver {
	t.Helper()
	bin, err := FindBinaries(os.Getenv)
	if err != nil {
		t.Skipf("QEMU is not installed (%v); CI installs qemu-system-x86 and qemu-utils", err)
	}
	h := home.Layout{Root: t.TempDir()}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	golden := h.Golden(blankGolden)
	if out, err := exec.Command(bin.Img, "create", "-q", "-f", "qcow2", golden, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	registerManifest(t, h, home.Golden, blankGolden, golden)
	runtime := h.Runtime(blankRuntime)
	if err := isofs.Write(runtime, protocol.RuntimeVolumeLabel, map[string][]byte{"manifest.json": []byte("{}")}, home.PrivateFileMode); err != nil {
		t.Fatal(err)
	}
	registerManifest(t, h, home.Runtime, blankRuntime, runtime)
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	d, err := New(context.Background(), Options{Home: h, Config: &cfg, Binaries: bin})
	if err != nil {
		t.Fatal(err)
	}
	d.PoweroffGrace = 2 * time.Second
	// Nothing answers behind the forward of a blank disk: don't wait the
	// full proof timeout before the kill.
	d.PoweroffCall = 2 * time.Second
	return d
}

func registerManifest(t testing.TB, h home.Layout, kind home.ImageKind, version, file string) {
	t.Helper()
	sum, size, err := artifact.FileSHA256(file)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(protocol.ImageManifest{Kind: string(kind), Version: version, File: filepath.Base(file), SHA256: sum, Size: size, Created: time.Now().UTC().Format(time.RFC3339)})
	if err := os.WriteFile(h.ImageManifest(kind, version), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func blankSpec(id home.VMID) driver.Spec {
	return driver.Spec{ID: id, CPUs: 1, MemoryMiB: 128, GoldenImage: blankGolden, RuntimeImage: blankRuntime, Token: testToken}
}

func TestRealQEMULifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	id := home.VMID{Namespace: "team-a", Name: "helper"}
	vm := d.home.VM(id)
	t.Cleanup(func() { d.Destroy(ctx, id) })

	obs, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if obs.State != driver.Running || obs.PID == 0 || obs.GuestPort == 0 || !obs.Provisioned || obs.GoldenImage != blankGolden || obs.CPUs != 1 || obs.MemoryMiB != 128 {
		t.Fatalf("Start() = %+v; want Running with pid, port, disk and the golden image", obs)
	}
	for _, p := range []string{vm.Disk(), vm.Seed(), vm.QEMUJSON(), vm.QEMULog()} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after Start(): %v", err)
		}
	}
	if out, _ := exec.Command(d.bin.Img, "info", "-U", vm.Disk()).CombinedOutput(); !strings.Contains(string(out), "backing file: "+d.home.Golden(blankGolden)) {
		t.Errorf("the overlay's backing file is not the golden image: %s", out)
	}
	cmdline, _ := os.ReadFile("/proc/" + itoa(obs.PID) + "/cmdline")
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if f := hasForbiddenFlag(args); f != "" || args[0] != d.bin.System || !filepath.IsAbs(args[0]) {
		t.Errorf("running QEMU argv %q: forbidden %q, want the absolute %s", args, f, d.bin.System)
	}
	if cwd, _ := os.Readlink("/proc/" + itoa(obs.PID) + "/cwd"); cwd != d.home.Root {
		t.Errorf("QEMU's working directory = %q, want the home %q", cwd, d.home.Root)
	}
	environ, _ := os.ReadFile("/proc/" + itoa(obs.PID) + "/environ")
	for _, kv := range strings.Split(string(environ), "\x00") {
		name, _, _ := strings.Cut(kv, "=")
		if name != "" && !allowedEnv[name] && !strings.HasPrefix(name, "LC_") {
			t.Errorf("QEMU's environment holds %s, which is not on the allowlist", name)
		}
	}

	again, err := d.Start(ctx, blankSpec(id))
	if err != nil || again.PID != obs.PID {
		t.Errorf("second Start() = %+v, %v; want the same QEMU (pid %d)", again, err, obs.PID)
	}

	// No guest answers behind the forward (nothing boots): the proof fails,
	// the token is never sent, and QEMU is killed at once.
	res, err := d.Stop(ctx, id, testToken)
	if err != nil || !res.WasRunning || !res.Killed || res.PoweredOff {
		t.Errorf("Stop() = %+v, %v; want killed (no guest accepted the poweroff)", res, err)
	}
	if o, _ := d.Observe(ctx, id); o.State != driver.Stopped || o.Exited {
		t.Errorf("after Stop(), Observe() = %+v; want Stopped, record cleared", o)
	}
	if _, err := os.Stat(vm.QEMUJSON()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("qemu.json after Stop(): %v, want removed", err)
	}

	// A QEMU killed from outside is noticed as exited.
	obs, err = d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(obs.PID, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	var o driver.Observation
	for time.Now().Before(deadline) {
		if o, _ = d.Observe(ctx, id); o.State == driver.Stopped {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if o.State != driver.Stopped || !o.Exited || o.ExitStatus != "signal: killed" {
		t.Errorf("after kill -9, Observe() = %+v; want Stopped, Exited, exit status \"signal: killed\"", o)
	}

	if err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{vm.Dir, vm.QEMULog()} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Destroy(), %s: %v; want removed", p, err)
		}
	}
	if err := d.Destroy(ctx, id); err != nil {
		t.Errorf("second Destroy() = %v, want nil", err)
	}
}

func TestRealQEMUDestroyKillsRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	id := home.VMID{Namespace: "team-b", Name: "helper"}
	obs, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if info, _ := readProc(obs.PID); info.Exists {
		t.Errorf("QEMU pid %d still runs after Destroy()", obs.PID)
	}
}

func TestRealQEMUPortTakenIsRetried(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	d.StartAttempts = 3
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	first := true
	d.pickPort = func() (int, error) {
		if first {
			first = false
			return takenPort, nil
		}
		return freePort()
	}
	id := home.VMID{Namespace: "default", Name: "retry"}
	t.Cleanup(func() { d.Destroy(ctx, id) })
	obs, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatalf("Start() with the first port taken = %v", err)
	}
	if obs.GuestPort == takenPort {
		t.Errorf("started on the taken port %d", takenPort)
	}
	if log, _ := os.ReadFile(d.home.VM(id).QEMULog()); !strings.Contains(string(log), portTakenMessage) {
		t.Errorf("QEMU's log does not show the taken port was met: %s", log)
	}
}

func TestRealQEMUStartFailureQuotesQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	// TCG cannot run the "host" CPU model: QEMU exits at once and its own
	// words must reach the caller. (Config.Validate refuses this pair; it is
	// set here directly to make QEMU fail.)
	d.cfg = hostconfig.Config{Accelerator: hostconfig.TCG, CPUModel: hostconfig.CPUModel}
	id := home.VMID{Namespace: "default", Name: "broken"}
	t.Cleanup(func() { d.Destroy(ctx, id) })
	_, err := d.Start(ctx, blankSpec(id))
	if err == nil || !strings.Contains(err.Error(), "requires KVM") {
		t.Fatalf("Start() = %v; want QEMU's own message about the CPU model", err)
	}
	if o, _ := d.Observe(ctx, id); o.State != driver.Stopped || o.PID != 0 {
		t.Errorf("after a failed start, Observe() = %+v; want Stopped without a record", o)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestRealQEMUNeverTwoOnOneDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	id := home.VMID{Namespace: "default", Name: "twice"}
	obs, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(obs.PID, syscall.SIGKILL)
		d.waitGone(ctx, record{PID: obs.PID}, 5*time.Second)
		d.Destroy(ctx, id)
	})
	// The record is lost (a server killed between spawn and write, or a
	// person removed it): the driver sees STOPPED and starts again, and
	// QEMU's own image lock keeps the second QEMU off the disk.
	if err := os.Remove(d.home.VM(id).QEMUJSON()); err != nil {
		t.Fatal(err)
	}
	_, err = d.Start(ctx, blankSpec(id))
	if err == nil || !strings.Contains(err.Error(), "another QEMU holds the disk") {
		t.Fatalf("second Start() on a disk in use = %v; want QEMU's lock refusal with the hint", err)
	}
	if info, _ := readProc(obs.PID); !info.Exists {
		t.Error("the first QEMU died")
	}
}

func TestRealQEMURebootIsStopAndStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	id := home.VMID{Namespace: "default", Name: "reboot"}
	t.Cleanup(func() { d.Destroy(ctx, id) })
	first, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	spec := blankSpec(id)
	spec.MemoryMiB = 160 // a new size applies only through a new QEMU
	second, err := d.Reboot(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if second.State != driver.Running || second.PID == first.PID || second.MemoryMiB != 160 {
		t.Errorf("Reboot() = %+v after %+v; want a new QEMU with the new memory size", second, first)
	}
	if info, _ := readProc(first.PID); info.Exists {
		t.Errorf("the first QEMU (pid %d) still runs after Reboot()", first.PID)
	}
}

// TestRealQEMUAdoptedByANewServer: a server that restarts (a new Driver on
// the same home, nothing in memory) adopts the running QEMU from qemu.json,
// does not start a second one, and can stop it through the kill rule's
// second half (pid alive, same start time, this user's, port listening).
func TestRealQEMUAdoptedByANewServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d1 := realDriver(t)
	id := home.VMID{Namespace: "default", Name: "adopt"}
	first, err := d1.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	cfg := d1.cfg
	d2, err := New(ctx, Options{Home: d1.home, Config: &cfg, Binaries: d1.bin})
	if err != nil {
		t.Fatal(err)
	}
	d2.PoweroffCall = 2 * time.Second
	t.Cleanup(func() { d2.Destroy(ctx, id) })
	obs, err := d2.Observe(ctx, id)
	if err != nil || obs.State != driver.Running || obs.PID != first.PID || obs.GuestPort != first.GuestPort {
		t.Fatalf("new driver Observe() = %+v, %v; want the running QEMU %d adopted", obs, err, first.PID)
	}
	again, err := d2.Start(ctx, blankSpec(id))
	if err != nil || again.PID != first.PID {
		t.Errorf("new driver Start() = %+v, %v; want the adopted QEMU, no second one", again, err)
	}
	res, err := d2.Stop(ctx, id, testToken)
	if err != nil || !res.Killed {
		t.Errorf("new driver Stop() = %+v, %v; want the adopted QEMU killed (no guest on a blank disk)", res, err)
	}
	if info, _ := readProc(first.PID); info.Exists {
		t.Errorf("QEMU pid %d still runs", first.PID)
	}
}
