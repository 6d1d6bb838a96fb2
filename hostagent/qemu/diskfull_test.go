package qemu

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/home/smallfs"
)

// TestStartOnAFullDisk runs real starts with the home on a small tmpfs that
// is filled at each write of a start in turn: the overlay (qemu-img), the
// seed, and qemu.json after QEMU is spawned. Each start fails saying the disk
// is full and what to do, leaves no record half-written (each is absent or
// parses), no QEMU running, and the next start after the space returns runs.
func TestStartOnAFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	bin, err := FindBinaries(os.Getenv)
	if err != nil {
		t.Skipf("QEMU is not installed (%v); CI installs qemu-system-x86 and qemu-utils", err)
	}
	root, ok := smallfs.Mount(t, "4m")
	if !ok {
		return
	}
	h := home.Layout{Root: filepath.Join(root, "home")}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	registerBlank(t, bin, h, blankGolden)
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	ctx := context.Background()
	d, err := New(ctx, Options{Home: h, Config: &cfg, Binaries: bin})
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		reason string
		// before runs before the start that meets the full disk: a first
		// start and stop when the disk is to exist, the fill itself when
		// the disk is full from the start. It returns the filler.
		before func(t *testing.T, id home.VMID) string
		// during fills the disk at a commit point of the start.
		during string
		// absent are the files that must not exist after the failed start.
		absent func(vm home.VM) []string
	}{
		"overlay": {
			reason: "qemu-img cannot make the overlay: it says so only in its output",
			before: func(t *testing.T, id home.VMID) string { return smallfs.Fill(t, root) },
			absent: func(vm home.VM) []string { return []string{vm.Disk(), vm.QEMUJSON(), vm.StartPending()} },
		},
		"seed": {
			reason: "the overlay exists from an earlier start; the new seed cannot be written",
			before: func(t *testing.T, id home.VMID) string {
				startAndKill(t, d, id)
				return smallfs.Fill(t, root)
			},
			absent: func(vm home.VM) []string { return []string{vm.QEMUJSON(), vm.StartPending()} },
		},
		"qemu.json": {
			reason: "QEMU is spawned and the disk fills before its record is written: it is killed, and no record says it runs",
			before: func(t *testing.T, id home.VMID) string { return "" },
			during: crashpoint.QEMUSpawned,
			absent: func(vm home.VM) []string { return []string{vm.QEMUJSON()} },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			id := home.VMID{Namespace: "full", Name: strings.ReplaceAll(name, ".", "-")}
			vm := h.VM(id)
			cleanupVM(t, d, id)
			filler := tc.before(t, id)
			t.Cleanup(func() { _ = os.Remove(filler) })
			unhook := func() {}
			if tc.during != "" {
				unhook = crashpoint.OnHit(tc.during, func() { filler = smallfs.Fill(t, root) })
				defer unhook()
			}
			_, err := d.Start(ctx, blankSpec(id))
			if !home.DiskFull(err) {
				t.Fatalf("%s\nStart() on a full disk = %v; want an error DiskFull finds", tc.reason, err)
			}
			t.Logf("Start() on a full disk: %v", err)
			for _, want := range []string{"the disk is full", "df -h " + h.Root} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s\nStart() error %q does not say %q", tc.reason, err, want)
				}
			}
			if w, ok := h.LastFullWrite(); !ok || !strings.HasPrefix(w.Path, vm.Dir) {
				t.Errorf("%s\nLastFullWrite() = %+v, %v; want the failed write under %s", tc.reason, w, ok, vm.Dir)
			}
			for _, p := range tc.absent(vm) {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s\n%s after the failed start: %v; want it absent", tc.reason, p, err)
				}
			}
			assertWhole(t, vm)
			if obs, err := d.Observe(ctx, id); err != nil || obs.State != driver.Stopped {
				t.Errorf("%s\nObserve() after the failed start = %+v, %v; want STOPPED", tc.reason, obs, err)
			}
			if pid := qemuNamed(vm.QEMUName()); pid != 0 {
				t.Errorf("%s\nQEMU pid %d of the failed start still runs", tc.reason, pid)
			}

			// Space returns: the next start runs, its records whole.
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if _, ok := h.LastFullWrite(); ok {
				t.Errorf("%s\nLastFullWrite() still remembers the failed write once the space returned", tc.reason)
			}
			unhook()
			obs, err := d.Start(ctx, blankSpec(id))
			if err != nil || obs.State != driver.Running {
				t.Fatalf("%s\nStart() once the space returned = %+v, %v; want RUNNING", tc.reason, obs, err)
			}
			assertWhole(t, vm)
			if _, err := readRecord(vm.QEMUJSON()); err != nil {
				t.Errorf("%s\nqemu.json of the start after the space returned: %v", tc.reason, err)
			}
		})
	}
}

// startAndKill starts the VM (making its overlay and seed) and kills it.
func startAndKill(t *testing.T, d *Driver, id home.VMID) {
	t.Helper()
	if _, err := d.Start(context.Background(), blankSpec(id)); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Kill(context.Background(), id); err != nil || !res.Gone {
		t.Fatalf("Kill() = %+v, %v", res, err)
	}
}

// assertWhole checks that what the VM's directory holds is whole: only the
// files of a VM (no temporary file a write left), each record parsing and
// the seed reading as an ISO.
func assertWhole(t *testing.T, vm home.VM) {
	t.Helper()
	entries, err := os.ReadDir(vm.Dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	known := map[string]bool{home.DiskFile: true, home.SeedFile: true, home.QEMUJSONFile: true, home.StartPendingFile: true, home.SerialLog: true}
	for _, e := range entries {
		if !known[e.Name()] {
			t.Errorf("%s holds %s, which no VM has: a write left it behind", vm.Dir, e.Name())
		}
	}
	for _, p := range []string{vm.QEMUJSON(), vm.StartPending()} {
		if _, err := os.Stat(p); err == nil {
			if _, err := decodeRecord(p, func(record) error { return nil }); err != nil {
				t.Errorf("a record is half-written: %v", err)
			}
		}
	}
	if _, err := os.Stat(vm.Seed()); err == nil {
		if _, _, err := isofs.Read(vm.Seed()); err != nil {
			t.Errorf("the seed does not read: %v", err)
		}
	}
}

// qemuNamed is the pid of a live process whose argv says -name name, or 0.
func qemuNamed(name string) int {
	entries, _ := os.ReadDir("/proc")
	want := "\x00-name\x00" + name + "\x00"
	for _, e := range entries {
		argv, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(argv), want) {
			pid, _ := strconv.Atoi(e.Name())
			return pid
		}
	}
	return 0
}
