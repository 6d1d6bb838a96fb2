package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
// guest port and is killed and destroyed for real. The guest side
// (health, a poweroff the guest performs) needs the test image: see
// image_integration_test.go.

// blankGolden and blankRuntime are the version of the blank images
// realDriver registers.
const blankGolden = "20260101T000000Z-blank"
const blankRuntime = blankGolden

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
	registerBlank(t, bin, h, blankGolden)
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	d, err := New(context.Background(), Options{Home: h, Config: &cfg, Binaries: bin})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// blankGrace is the grace of a stop of a blank VM: no guest ever accepts its
// poweroff, so it is killed at once whatever the grace.
const blankGrace = 2 * time.Second

// qemuTimeout bounds the waits for QEMU itself (to exit, to listen) under
// tcg on a loaded host; reaching it fails the test.
const qemuTimeout = 30 * time.Second

// waitListening waits until QEMU listens on the guest port, which it does
// once its user network is set up, whether a guest boots or not.
func waitListening(t testing.TB, port int) {
	t.Helper()
	deadline := time.Now().Add(qemuTimeout)
	for !portAccepts(port) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on guest port %d within %s", port, qemuTimeout)
		}
		time.Sleep(observePoll)
	}
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

// settledCwd reads a process's working directory until it is want or
// qemuTimeout passes. QEMU's own start leaves it elsewhere for a moment: a
// library it links (libndctl, through libpmem) walks sysfs by fchdir and
// comes back, and CI once read "/sys/bus/nd/devices" in that moment. QEMU
// never moves to the home by itself, so a wrong cmd.Dir still fails.
func settledCwd(pid int, want string) string {
	deadline := time.Now().Add(qemuTimeout)
	for {
		cwd, _ := os.Readlink("/proc/" + itoa(pid) + "/cwd")
		if cwd == want || time.Now().After(deadline) {
			return cwd
		}
		time.Sleep(observePoll)
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
	cleanupVM(t, d, id)

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
	if cwd := settledCwd(obs.PID, d.home.Root); cwd != d.home.Root {
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
	res, err := stopVM(ctx, d, id, testToken, blankGrace)
	if err != nil || !res.WasRunning || !res.Killed || res.PoweredOff || res.PoweroffErr == nil {
		t.Errorf("stopVM() = %+v, %v; want killed (no guest accepted the poweroff)", res, err)
	}
	if o, _ := d.Observe(ctx, id); o.State != driver.Stopped || o.Exited {
		t.Errorf("after the stop, Observe() = %+v; want Stopped, record cleared", o)
	}
	if _, err := os.Stat(vm.QEMUJSON()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("qemu.json after the stop: %v, want removed", err)
	}
	if info, _ := readProc(obs.PID); info.Exists {
		t.Errorf("QEMU pid %d still runs after the stop", obs.PID)
	}

	// A QEMU killed from outside is noticed as exited.
	obs, err = d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(obs.PID, syscall.SIGKILL)
	o := waitObserved(t, d, id, qemuTimeout, "exit of the QEMU killed from outside", notRunning)
	if o.State != driver.Stopped || !o.Exited || o.ExitStatus != "signal: killed" {
		t.Errorf("after kill -9, Observe() = %+v; want Stopped, Exited, exit status \"signal: killed\"", o)
	}

	if err := destroyVM(ctx, d, id); err != nil {
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
	cleanupVM(t, d, id)
	// Destroy waits a moment for the killed QEMU; one that has not exited
	// yet is ErrStillRunning, and destroyVM asks again.
	if err := destroyVM(ctx, d, id); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	if info, _ := readProc(obs.PID); info.Exists {
		t.Errorf("QEMU pid %d still runs after Destroy()", obs.PID)
	}
	if _, err := os.Stat(d.home.VM(id).Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Destroy(), %s: %v; want removed", d.home.VM(id).Dir, err)
	}
}

// TestRealQEMUPortTakenIsRetried: the guest port is taken between picking it
// and QEMU binding it. Start returns at once all the same; a later Observe
// finds QEMU exited with the port taken (its log says so), and the start the
// reconciler then makes on a free port runs.
func TestRealQEMUPortTakenIsRetried(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
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
	cleanupVM(t, d, id)

	obs, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatalf("Start() on a taken port = %v; want it to return without waiting for QEMU to bind the port", err)
	}
	if obs.GuestPort != takenPort {
		t.Fatalf("Start() = %+v; want it on the taken port %d", obs, takenPort)
	}
	o := waitObserved(t, d, id, qemuTimeout, "exit of the QEMU on the taken port", notRunning)
	if o.State != driver.Stopped || !o.Exited || !o.PortTaken || !strings.Contains(o.LogTail, portTakenMessage) {
		t.Fatalf("after a start on the taken port, Observe() = %+v; want Stopped, Exited and PortTaken, with QEMU's words in the log tail", o)
	}

	// The reconciler starts again on PortTaken.
	again, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatalf("second Start() = %v", err)
	}
	if again.State != driver.Running || again.GuestPort == takenPort || again.PID == obs.PID {
		t.Fatalf("second Start() = %+v; want a new QEMU on another port", again)
	}
	// It bound its port: QEMU listens there, and still runs after that.
	waitListening(t, again.GuestPort)
	if o, err := d.Observe(ctx, id); err != nil || o.State != driver.Running || o.PID != again.PID || o.PortTaken || o.Exited {
		t.Errorf("after the second start listened, Observe() = %+v, %v; want the new QEMU Running, no port taken", o, err)
	}
}

// TestRealQEMUStartFailureIsObservedInQEMUsWords: a QEMU that exits at once
// is not Start's error (Start does not wait); Observe reports it exited,
// with how it ended and QEMU's own words, and Kill clears its record.
func TestRealQEMUStartFailureIsObservedInQEMUsWords(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	// TCG cannot run the "host" CPU model: QEMU exits at once. (Config.Validate
	// refuses this pair; it is set here directly to make QEMU fail.)
	d.cfg = hostconfig.Config{Accelerator: hostconfig.TCG, CPUModel: hostconfig.CPUModel}
	id := home.VMID{Namespace: "default", Name: "broken"}
	cleanupVM(t, d, id)
	if _, err := d.Start(ctx, blankSpec(id)); err != nil {
		t.Fatalf("Start() = %v; want it to return once QEMU is spawned", err)
	}
	o := waitObserved(t, d, id, qemuTimeout, "exit of the QEMU that cannot run its CPU model", notRunning)
	if o.State != driver.Stopped || !o.Exited || o.PortTaken || !strings.HasPrefix(o.ExitStatus, "exit status ") || o.ExitStatus == "exit status 0" || !strings.Contains(o.LogTail, "requires KVM") {
		t.Fatalf("Observe() = %+v; want Stopped and Exited with a failed exit status and QEMU's own message about the CPU model", o)
	}
	if res, err := d.Kill(ctx, id); err != nil || res != (driver.KillResult{Gone: true}) {
		t.Errorf("Kill() of the exited QEMU = %+v, %v; want nothing to kill, gone", res, err)
	}
	if o, _ := d.Observe(ctx, id); o.State != driver.Stopped || o.PID != 0 || o.Exited {
		t.Errorf("after Kill(), Observe() = %+v; want Stopped without a record", o)
	}
}

// TestStartDoesNotWaitForTheGuestPort: Start returns once QEMU is spawned
// and recorded. A QEMU that never listens on its guest port (here a fake
// QEMU binary that only sleeps) is started and observed Running while its
// port stays closed; being this driver's child, it may be killed without the
// port check.
func TestStartDoesNotWaitForTheGuestPort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs qemu-img")
	}
	ctx := context.Background()
	d := realDriver(t)
	fakeQEMU := filepath.Join(t.TempDir(), "fake-qemu-that-never-listens")
	if err := os.WriteFile(fakeQEMU, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.bin.System = fakeQEMU
	id := home.VMID{Namespace: "default", Name: "quick"}
	cleanupVM(t, d, id)

	obs, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if obs.State != driver.Running || obs.PID == 0 || obs.GuestPort == 0 {
		t.Fatalf("Start() = %+v; want Running with a pid and a port", obs)
	}
	if portAccepts(obs.GuestPort) {
		t.Fatalf("something listens on guest port %d of a QEMU that never listens", obs.GuestPort)
	}
	if o, err := d.Observe(ctx, id); err != nil || o.State != driver.Running || o.PID != obs.PID {
		t.Errorf("Observe() right after Start() = %+v, %v; want Running", o, err)
	}
	if _, err := d.Health(ctx, id, testToken); err == nil {
		t.Error("Health() of a VM whose port never listens succeeded")
	}
	res, err := d.Kill(ctx, id)
	if err != nil || res != (driver.KillResult{WasRunning: true, Gone: true}) {
		t.Errorf("Kill() = %+v, %v; want the spawned process killed and gone", res, err)
	}
	if info, _ := readProc(obs.PID); info.Exists {
		t.Errorf("pid %d still runs after Kill()", obs.PID)
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
		d.waitGone(ctx, record{PID: obs.PID}, qemuTimeout)
		if err := destroyVM(ctx, d, id); err != nil {
			t.Errorf("Destroy() = %v", err)
		}
	})
	// QEMU takes the disk's lock as it builds the machine, which is done
	// once it listens.
	waitListening(t, obs.GuestPort)
	// The record is lost (a server killed between spawn and write, or a
	// person removed it): the driver sees STOPPED and starts again, and
	// QEMU's own image lock keeps the second QEMU off the disk.
	if err := os.Remove(d.home.VM(id).QEMUJSON()); err != nil {
		t.Fatal(err)
	}
	second, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatalf("second Start() = %v", err)
	}
	o := waitObserved(t, d, id, qemuTimeout, "exit of the second QEMU on a disk in use", notRunning)
	if o.State != driver.Stopped || !o.Exited || o.PID != second.PID || !strings.Contains(o.LogTail, diskLockedMessage) || !strings.Contains(o.LogTail, "another QEMU holds the disk") {
		t.Fatalf("second QEMU on a disk in use: Observe() = %+v; want it exited with QEMU's lock refusal and the hint", o)
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
	cleanupVM(t, d, id)
	first, err := d.Start(ctx, blankSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	spec := blankSpec(id)
	spec.MemoryMiB = 160 // a new size applies only through a new QEMU
	second, err := rebootVM(ctx, d, spec, blankGrace)
	if err != nil {
		t.Fatal(err)
	}
	if second.State != driver.Running || second.PID == first.PID || second.MemoryMiB != 160 {
		t.Errorf("the reboot's Start() = %+v after %+v; want a new QEMU with the new memory size", second, first)
	}
	if info, _ := readProc(first.PID); info.Exists {
		t.Errorf("the first QEMU (pid %d) still runs after the reboot", first.PID)
	}
	cmdline, _ := os.ReadFile("/proc/" + itoa(second.PID) + "/cmdline")
	if !strings.Contains(string(cmdline), "\x00-m\x00160\x00") {
		t.Errorf("the new QEMU's argv %q does not hold -m 160", cmdline)
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
	// A new server proves a QEMU it did not spawn by its listening guest
	// port; Start did not wait for it to listen, so the test does.
	waitListening(t, first.GuestPort)
	cfg := d1.cfg
	d2, err := New(ctx, Options{Home: d1.home, Config: &cfg, Binaries: d1.bin})
	if err != nil {
		t.Fatal(err)
	}
	cleanupVM(t, d2, id)
	obs, err := d2.Observe(ctx, id)
	if err != nil || obs.State != driver.Running || obs.PID != first.PID || obs.GuestPort != first.GuestPort {
		t.Fatalf("new driver Observe() = %+v, %v; want the running QEMU %d adopted", obs, err, first.PID)
	}
	again, err := d2.Start(ctx, blankSpec(id))
	if err != nil || again.PID != first.PID {
		t.Errorf("new driver Start() = %+v, %v; want the adopted QEMU, no second one", again, err)
	}
	res, err := stopVM(ctx, d2, id, testToken, blankGrace)
	if err != nil || !res.WasRunning || !res.Killed {
		t.Errorf("new driver's stop = %+v, %v; want the adopted QEMU killed (no guest on a blank disk)", res, err)
	}
	if info, _ := readProc(first.PID); info.Exists {
		t.Errorf("QEMU pid %d still runs", first.PID)
	}
}

// TestRealQEMUImagesChosenByTheDriver: a spec that names no image gets the
// newest registered golden image for a new disk and the newest runtime
// image; an existing disk keeps the golden image it sits on, however new the
// registered ones are.
func TestRealQEMUImagesChosenByTheDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	const newer, newest = "20260201T000000Z-blank", "20260301T000000Z-blank"
	registerBlank(t, d.bin, d.home, newer)
	id := home.VMID{Namespace: "default", Name: "chosen"}
	cleanupVM(t, d, id)

	want := []driver.Image{
		{Kind: home.Golden, Version: blankGolden}, {Kind: home.Golden, Version: newer},
		{Kind: home.Runtime, Version: blankRuntime}, {Kind: home.Runtime, Version: newer},
	}
	if got, err := d.Images(ctx); err != nil || !slices.Equal(got, want) {
		t.Errorf("Images() = %v, %v; want %v", got, err, want)
	}

	spec := blankSpec(id)
	spec.GoldenImage, spec.RuntimeImage = "", ""
	obs, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start() without images = %v", err)
	}
	if obs.GoldenImage != newer || obs.RuntimeImage != newer {
		t.Errorf("Start() without images = golden %q, runtime %q; want the newest, %q", obs.GoldenImage, obs.RuntimeImage, newer)
	}
	if out, _ := exec.Command(d.bin.Img, "info", "-U", d.home.VM(id).Disk()).CombinedOutput(); !strings.Contains(string(out), "backing file: "+d.home.Golden(newer)) {
		t.Errorf("the new overlay does not sit on the newest golden image: %s", out)
	}
	if _, err := stopVM(ctx, d, id, testToken, blankGrace); err != nil {
		t.Fatal(err)
	}

	registerBlank(t, d.bin, d.home, newest)
	obs, err = d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("second Start() without images = %v", err)
	}
	if obs.GoldenImage != newer || obs.RuntimeImage != newest {
		t.Errorf("second Start() = golden %q, runtime %q; want the disk's own golden %q and the newest runtime %q", obs.GoldenImage, obs.RuntimeImage, newer, newest)
	}
	if got, err := RuntimesInUse(d.home); err != nil || got[id] != newest {
		t.Errorf("RuntimesInUse() = %v, %v; want %s running %s", got, err, id, newest)
	}
	if _, err := stopVM(ctx, d, id, testToken, blankGrace); err != nil {
		t.Fatal(err)
	}
	if got, err := RuntimesInUse(d.home); err != nil || len(got) != 0 {
		t.Errorf("RuntimesInUse() with the VM stopped = %v, %v; want none", got, err)
	}
}

// registerBlank registers a blank golden image and a runtime ISO holding
// nothing, both of one version.
func registerBlank(t testing.TB, bin Binaries, h home.Layout, version string) {
	t.Helper()
	golden := h.Golden(version)
	if out, err := exec.Command(bin.Img, "create", "-q", "-f", "qcow2", golden, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	registerManifest(t, h, home.Golden, version, golden)
	runtime := h.Runtime(version)
	if err := isofs.Write(runtime, protocol.RuntimeVolumeLabel, map[string][]byte{"manifest.json": []byte("{}")}, home.PrivateFileMode); err != nil {
		t.Fatal(err)
	}
	registerManifest(t, h, home.Runtime, version, runtime)
}

// TestRealQEMUDiskGrowsNeverShrinks (ref 9.7): a larger DiskBytes grows the
// overlay at the next start; a smaller one leaves it as it is.
func TestRealQEMUDiskGrowsNeverShrinks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d := realDriver(t)
	id := home.VMID{Namespace: "default", Name: "grows"}
	cleanupVM(t, d, id)
	size := func() int64 {
		t.Helper()
		info, err := d.overlayInfo(ctx, d.home.VM(id).Disk())
		if err != nil {
			t.Fatal(err)
		}
		return info.size
	}
	spec := blankSpec(id)
	for _, step := range []struct {
		ask, want int64
	}{{ask: 96 << 20, want: 96 << 20}, {ask: 160 << 20, want: 160 << 20}, {ask: 128 << 20, want: 160 << 20}} {
		spec.DiskBytes = step.ask
		if _, err := d.Start(ctx, spec); err != nil {
			t.Fatalf("Start() with a %d-byte disk = %v", step.ask, err)
		}
		if got := size(); got != step.want {
			t.Errorf("asked for %d bytes: the overlay is %d; want %d", step.ask, got, step.want)
		}
		if _, err := stopVM(ctx, d, id, testToken, blankGrace); err != nil {
			t.Fatal(err)
		}
	}
}
