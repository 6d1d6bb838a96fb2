package heartbeat

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/home/smallfs"
)

// TestDiskPressureSaysAFailedWrite: with the home on a small tmpfs, a beat on
// a roomy disk says nothing of writes; filled, the beat's probe write fails
// and DiskPressure is True with reason DiskFull naming the write and the fix,
// though the free space alone (faked roomy here) would say Enough; when the
// space returns it is False again. A write of the agent's the disk refused
// (a VM's record) holds DiskPressure True, under its own name, until a write
// of the agent's succeeds.
func TestDiskPressureSaysAFailedWrite(t *testing.T) {
	root, ok := smallfs.Mount(t, "4m")
	if !ok {
		return
	}
	h := home.Layout{Root: filepath.Join(root, "home")}
	if err := os.MkdirAll(h.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	roomy := Facts{CPUs: 8, MemTotal: 32 * gi, MemAvailable: 20 * gi, DiskTotal: 200 * gi, DiskFree: 100 * gi, Accelerator: dotsv1.AcceleratorKVM, QEMUVersion: "7.2.22"}
	host := &dotsv1.Host{}
	beat := func(step string, want metav1.ConditionStatus, wantReason string, wantSays ...string) {
		t.Helper()
		f := roomy
		f.FullWrite = fullWrite(h)
		setStatus(host, f, now)
		c := meta.FindStatusCondition(host.Status.Conditions, dotsv1.DiskPressureCondition)
		if c == nil || c.Status != want || c.Reason != wantReason {
			t.Fatalf("%s: DiskPressure = %+v; want %s with reason %s", step, c, want, wantReason)
		}
		for _, s := range wantSays {
			if !strings.Contains(c.Message, s) {
				t.Errorf("%s: DiskPressure's message %q does not say %q", step, c.Message, s)
			}
		}
		t.Logf("%s: DiskPressure %s %s: %s", step, c.Status, c.Reason, c.Message)
	}

	beat("roomy", metav1.ConditionFalse, dotsv1.NoPressureReason)
	filler := smallfs.Fill(t, root)
	beat("full", metav1.ConditionTrue, dotsv1.DiskFullReason, "no space left on device", "df -h "+h.Root)
	if leftovers, _ := filepath.Glob(filepath.Join(h.Root, ".write-probe-*")); len(leftovers) != 0 {
		t.Errorf("the probe left %v behind", leftovers)
	}
	before := host.DeepCopy()
	beat("still full", metav1.ConditionTrue, dotsv1.DiskFullReason)
	if c, b := meta.FindStatusCondition(host.Status.Conditions, dotsv1.DiskPressureCondition), meta.FindStatusCondition(before.Status.Conditions, dotsv1.DiskPressureCondition); c.Message != b.Message {
		t.Errorf("a second beat on the same full disk changed the message (the Host would be written at every beat):\n%s\n%s", b.Message, c.Message)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	beat("space returned", metav1.ConditionFalse, dotsv1.NoPressureReason)

	// A write of the agent's that the disk refused, then a small probe that
	// passes: the refused write still holds DiskPressure, until a write of
	// the agent's succeeds.
	record := filepath.Join(h.Root, "vms", "default", "helper", "qemu.json")
	h.NoteWrite(record, fmt.Errorf("write %s: %w", record, &os.PathError{Op: "write", Path: record, Err: syscall.ENOSPC}))
	beat("a record refused", metav1.ConditionTrue, dotsv1.DiskFullReason, record)
	h.NoteWrite(record, nil)
	beat("the record written", metav1.ConditionFalse, dotsv1.NoPressureReason)
}
