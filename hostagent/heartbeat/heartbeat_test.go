package heartbeat

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

const gi = int64(1) << 30

func TestSetStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	roomy := Facts{CPUs: 8, MemTotal: 32 * gi, MemAvailable: 20 * gi, DiskTotal: 200 * gi, DiskFree: 100*gi + 123,
		Accelerator: dotsv1.AcceleratorKVM, QEMUVersion: "7.2.22",
		Images: []driver.Image{{Kind: home.Runtime, Version: "r1"}, {Kind: home.Golden, Version: "g1"}}}
	tight := roomy
	tight.MemAvailable, tight.DiskFree = 3*gi, 30*gi
	broken := roomy
	broken.Problem, broken.Accelerator, broken.QEMUVersion = "qemu-system-x86_64 is not installed", "", ""
	tests := map[string]struct {
		reason               string
		facts                Facts
		wantReady            metav1.ConditionStatus
		wantMemory, wantDisk metav1.ConditionStatus
	}{
		"roomy": {
			reason: "a host with room and QEMU is Ready without pressure",
			facts:  roomy, wantReady: metav1.ConditionTrue, wantMemory: metav1.ConditionFalse, wantDisk: metav1.ConditionFalse,
		},
		"tight": {
			reason: "under one more default Computer (4 GiB, 40 GiB) after the reserve: pressure",
			facts:  tight, wantReady: metav1.ConditionTrue, wantMemory: metav1.ConditionTrue, wantDisk: metav1.ConditionTrue,
		},
		"no QEMU": {
			reason: "a host that cannot run VMs says why in Ready",
			facts:  broken, wantReady: metav1.ConditionFalse, wantMemory: metav1.ConditionFalse, wantDisk: metav1.ConditionFalse,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := &dotsv1.Host{}
			setStatus(h, tc.facts, now)
			got := map[string]metav1.ConditionStatus{}
			for _, c := range h.Status.Conditions {
				got[c.Type] = c.Status
			}
			want := map[string]metav1.ConditionStatus{dotsv1.ReadyCondition: tc.wantReady, dotsv1.MemoryPressureCondition: tc.wantMemory, dotsv1.DiskPressureCondition: tc.wantDisk}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s\nconditions -want +got:\n%s", tc.reason, diff)
			}
			if tc.facts.Problem != "" {
				if r := meta.FindStatusCondition(h.Status.Conditions, dotsv1.ReadyCondition); r.Reason != dotsv1.NoQEMUReason || r.Message != "this host cannot run VMs: "+tc.facts.Problem {
					t.Errorf("%s\nReady = %+v", tc.reason, r)
				}
			}
		})
	}

	h := &dotsv1.Host{}
	setStatus(h, roomy, now)
	if got, want := h.Status.Allocatable.Disk.Value(), 95*gi; got != want {
		t.Errorf("allocatable disk %d; want the free space less the reserve, in whole GiB: %d", got, want)
	}
	if got, want := h.Status.Allocatable.Memory.Value(), 31*gi; got != want {
		t.Errorf("allocatable memory %d; want %d", got, want)
	}
	wantImages := []dotsv1.HostImage{{Kind: "golden", Version: "g1"}, {Kind: "runtime", Version: "r1"}}
	if diff := cmp.Diff(wantImages, h.Status.Images); diff != "" {
		t.Errorf("images -want +got:\n%s", diff)
	}
	// A few bytes more free space writes nothing new.
	before := h.DeepCopy()
	again := roomy
	again.DiskFree += 4096
	setStatus(h, again, now.Add(time.Minute))
	if diff := cmp.Diff(before.Status, h.Status); diff != "" {
		t.Errorf("a beat with the same facts in whole GiB changed the status:\n%s", diff)
	}
}
