package qemu

import (
	"context"
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

	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/hostfix"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// crashHomeEnv hands the crash helper its home.
const crashHomeEnv = "QEMU_CRASH_TEST_HOME"

// TestCrashHelperStart is the agent of TestRealQEMUKilledBetweenSpawnAndRecord
// in a subprocess: it starts a VM and is killed (SIGKILL, by
// crashpoint.Env) right after QEMU's spawn, before qemu.json. It does
// nothing in an ordinary run.
func TestCrashHelperStart(t *testing.T) {
	root := os.Getenv(crashHomeEnv)
	if root == "" {
		t.Skip("the subprocess of TestRealQEMUKilledBetweenSpawnAndRecord")
	}
	bin, err := FindBinaries(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	d, err := New(context.Background(), Options{Home: home.Layout{Root: root}, Config: &cfg, Binaries: bin})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Start(context.Background(), blankSpec(home.VMID{Namespace: "default", Name: "crash"}))
	t.Fatalf("Start() returned (%v); the process should have been killed at %s", err, crashpoint.QEMUSpawned)
}

// TestRealQEMUKilledBetweenSpawnAndRecord: an agent killed -9 between QEMU's
// spawn and qemu.json leaves a QEMU running with no record. The start's
// pending record, written before the spawn, lets the next driver on the
// home find that QEMU and adopt it: it is observed running with its pid,
// a start does not spawn a second one on its disk, and a kill stops it.
func TestRealQEMUKilledBetweenSpawnAndRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	ctx := context.Background()
	d1 := realDriver(t)
	id := home.VMID{Namespace: "default", Name: "crash"}
	vm := d1.home.VM(id)

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperStart$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashHomeEnv+"="+d1.home.Root, crashpoint.Env+"="+crashpoint.QEMUSpawned)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the agent was not killed at %s: %v\n%s", crashpoint.QEMUSpawned, err, out)
	}
	if _, err := os.Stat(vm.QEMUJSON()); !os.IsNotExist(err) {
		t.Fatalf("qemu.json after a kill before it was written: %v", err)
	}
	pending, err := readPending(vm.StartPending())
	if err != nil {
		t.Fatalf("no pending record of the start: %v", err)
	}
	orphan, _, err := findQEMU(vm.QEMUName(), pending.GuestPort)
	if err != nil || orphan == 0 {
		t.Fatalf("the QEMU spawned before the kill is not running (%d, %v)", orphan, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })

	cfg := d1.cfg
	d2, err := New(ctx, Options{Home: d1.home, Config: &cfg, Binaries: d1.bin})
	if err != nil {
		t.Fatal(err)
	}
	cleanupVM(t, d2, id)
	obs, err := d2.Observe(ctx, id)
	if err != nil || obs.State != driver.Running || obs.PID != orphan || obs.GuestPort != pending.GuestPort {
		t.Fatalf("the next driver's Observe() = %+v, %v; want the QEMU pid %d adopted on port %d", obs, err, orphan, pending.GuestPort)
	}
	if _, err := os.Stat(vm.StartPending()); !os.IsNotExist(err) {
		t.Errorf("the pending record outlived the adoption: %v", err)
	}
	again, err := d2.Start(ctx, blankSpec(id))
	if err != nil || again.PID != orphan {
		t.Errorf("Start() after the adoption = %+v, %v; want the adopted QEMU, no second one", again, err)
	}
	waitListening(t, pending.GuestPort)
	res, err := stopVM(ctx, d2, id, testToken, blankGrace)
	if err != nil || !res.WasRunning || !res.Killed {
		t.Errorf("stop of the adopted QEMU = %+v, %v; want it killed", res, err)
	}
	if pid, _, _ := findQEMU(vm.QEMUName(), pending.GuestPort); pid != 0 {
		t.Errorf("QEMU pid %d of the crashed start still runs", pid)
	}
}

// TestRecoverDropsAStartThatLeftNothing: a pending record whose QEMU is not
// running (it exited, or the kill came before the spawn) and one of an
// earlier boot are dropped; one beside a qemu.json too.
func TestRecoverDropsAStartThatLeftNothing(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 100}
	d := testDriver(t, &boot)
	vm := d.home.VM(testID)
	for name, rec := range map[string]record{
		"this boot, nothing runs": {GuestPort: 1, Stamp: boot, StartedAt: time.Now()},
		"an earlier boot":         {GuestPort: 1, Stamp: home.Stamp{BootID: "boot-0", HostUptimeS: 5}},
	} {
		if err := writeRecord(vm.StartPending(), rec); err != nil {
			t.Fatal(err)
		}
		got, err := d.recoverStarts()
		if err != nil || len(got) != 1 || got[0].PID != 0 {
			t.Errorf("%s: recoverStarts() = %+v, %v; want the start dropped, nothing adopted", name, got, err)
		}
		if _, err := os.Stat(vm.StartPending()); !os.IsNotExist(err) {
			t.Errorf("%s: the pending record is still there (%v)", name, err)
		}
		if _, err := os.Stat(vm.QEMUJSON()); !os.IsNotExist(err) {
			t.Errorf("%s: a qemu.json was written (%v)", name, err)
		}
	}

	// A start that got as far as its record: the record stays as it is.
	rec := record{PID: 4242, GuestPort: 4243, Stamp: boot, StartedAt: time.Now().UTC()}
	writeTestRecord(t, d, rec)
	if err := writeRecord(vm.StartPending(), record{GuestPort: 4243, Stamp: boot}); err != nil {
		t.Fatal(err)
	}
	if got, err := d.recoverStarts(); err != nil || len(got) != 1 || got[0].PID != 0 {
		t.Errorf("beside a qemu.json: recoverStarts() = %+v, %v; want the pending record dropped", got, err)
	}
	if _, err := os.Stat(vm.StartPending()); !os.IsNotExist(err) {
		t.Errorf("beside a qemu.json: the pending record is still there (%v)", err)
	}
	if got, err := readRecord(vm.QEMUJSON()); err != nil || got.PID != rec.PID {
		t.Errorf("beside a qemu.json: the record reads %+v, %v; want it untouched", got, err)
	}
}

// TestObserveAQEMUThatNeverListens: a QEMU this driver spawned that does not
// listen on its guest port (a stand-in that never sets up networking) is
// observed running and NotListening, with its log; once something listens
// on the port it is not.
func TestObserveAQEMUThatNeverListens(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 100}
	d := testDriver(t, &boot)
	port := spawnStandIn(t, d, "qemu-that-never-listens", "#!/bin/sh\necho 'stuck before its network' >&2\nexec sleep 300\n", "tcg", "max")
	obs := observeUntil(t, d, func(o driver.Observation) bool { return strings.Contains(o.LogTail, "stuck before its network") })
	if obs.State != driver.Running || !obs.NotListening || !strings.Contains(obs.LogTail, "stuck before its network") {
		t.Fatalf("Observe() = %+v; want Running, NotListening, with what it wrote in LogTail", obs)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if obs, _ := d.Observe(context.Background(), testID); obs.State != driver.Running || obs.NotListening {
		t.Errorf("Observe() with the port listening = %+v; want Running and listening", obs)
	}
	res, err := d.Kill(context.Background(), testID)
	if err != nil || !res.WasRunning || !res.Gone {
		t.Errorf("Kill() of a spawned QEMU that never listened = %+v, %v; want it killed (the driver's own child)", res, err)
	}
}

// TestObserveAQEMUThatExitsNamesTheFix: a QEMU that exits at its start with
// QEMU's own words for a /dev/kvm this user may not open (a stand-in that
// writes them) is observed exited with the command that fixes it, the one
// the doctor's accelerator row gives (ref 3.4: the error names the fix).
func TestObserveAQEMUThatExitsNamesTheFix(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 100}
	d := testDriver(t, &boot)
	spawnStandIn(t, d, "qemu-without-kvm", "#!/bin/sh\necho 'Could not access KVM kernel module: Permission denied' >&2\n"+
		"echo 'qemu-system-x86_64: failed to initialize kvm: Permission denied' >&2\nexit 1\n", "kvm", "host")
	obs := observeUntil(t, d, func(o driver.Observation) bool { return o.Exited })
	if !obs.Exited {
		t.Fatalf("Observe() = %+v; want the QEMU that exited at its start seen exited", obs)
	}
	if want := hostfix.KVMGroup.String(); obs.Fix != want {
		t.Errorf("Observe().Fix = %q; want %q", obs.Fix, want)
	}
}

// spawnStandIn spawns, as testID's QEMU, a shell script standing in for
// QEMU (a fake, named so), with the machine's accelerator and CPU model, and
// kills it when the test ends. It returns the guest port it was given.
func spawnStandIn(t *testing.T, d *Driver, name, script, accel, cpuModel string) int {
	t.Helper()
	stand := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(stand, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d.bin.System = stand
	if err := os.MkdirAll(d.home.Logs(), 0o700); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	vm := d.home.VM(testID)
	m := machine{Binary: stand, Name: vm.QEMUName(), Accelerator: accel, CPUModel: cpuModel, CPUs: 1, MemoryMiB: 128,
		Disk: vm.Disk(), Seed: vm.Seed(), Runtime: vm.Seed(), SerialLog: vm.SerialLog(), GuestPort: port}
	if err := d.spawn(vm, m, "g", "r"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.Kill(context.Background(), testID) })
	return port
}

// observeUntil observes the test's VM until done says so, or for 5 s, and
// returns the last observation.
func observeUntil(t *testing.T, d *Driver, done func(driver.Observation) bool) driver.Observation {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(observePoll) {
		obs, err := d.Observe(context.Background(), testID)
		if err != nil {
			t.Fatal(err)
		}
		if done(obs) || time.Now().After(deadline) {
			return obs
		}
	}
}
