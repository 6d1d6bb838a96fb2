package computer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	"github.com/invisible-dots/invisible-dots/hostagent/prober"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// probed waits for the prober's next change of a result, or fails.
func probed(t *testing.T, p *prober.Manager) {
	t.Helper()
	select {
	case <-p.Updates():
	case <-time.After(5 * time.Second):
		t.Fatal("the prober enqueued nothing")
	}
}

// TestComputerReadsTheProber: with a prober, a reconcile never asks the
// guest itself: a started guest is STARTING until the prober's result
// says it answers (and the Computer is enqueued then), a running guest
// whose prober has not probed it yet (a restarted agent) keeps its Ready,
// and one that goes silent is said to be so once the prober says.
func TestComputerReadsTheProber(t *testing.T) {
	h := fake.NewHost()
	id := home.VMID{Namespace: "default", Name: "p"}
	r, c := newTestReconciler(h, testComputer("p", dotsv1.RunAlways))
	p := prober.New(h, 10*time.Millisecond)
	r.Prober = p
	ctx := t.Context()
	go func() { _ = p.Start(ctx) }()

	reconcileOnce(t, r, "p")
	got := getComputer(c, "p")
	if ready := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition); got.Status.State != dotsv1.ComputerStarting || ready == nil || ready.Reason != dotsv1.VMStartingReason {
		t.Fatalf("after the start, before a probe: state %s, Ready %+v; want STARTING", got.Status.State, ready)
	}
	if n := h.Calls("Health"); n > 1 {
		t.Errorf("%d health calls; want only the prober's", n)
	}
	probed(t, p)
	reconcileOnce(t, r, "p")
	if got := getComputer(c, "p"); got.Status.State != dotsv1.ComputerRunning || !meta.IsStatusConditionTrue(got.Status.Conditions, dotsv1.ReadyCondition) {
		t.Fatalf("after the prober's answer: state %s, conditions %+v; want RUNNING and Ready", got.Status.State, got.Status.Conditions)
	}

	// A restarted agent: a prober of its own that has not probed yet.
	restarted, _ := newTestReconciler(h)
	restarted.Client, restarted.APIReader = c, c
	restarted.Prober = prober.New(h, time.Hour)
	reconcileOnce(t, restarted, "p")
	if got := getComputer(c, "p"); got.Status.State != dotsv1.ComputerRunning || !meta.IsStatusConditionTrue(got.Status.Conditions, dotsv1.ReadyCondition) {
		t.Errorf("a restarted agent before its first probe: state %s, conditions %+v; want RUNNING and Ready kept", got.Status.State, got.Status.Conditions)
	}

	h.SetUnhealthy(id, errors.New("guest not answering"))
	probed(t, p)
	reconcileOnce(t, r, "p")
	got = getComputer(c, "p")
	if ready := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition); got.Status.State != dotsv1.ComputerRunning || ready == nil || ready.Reason != dotsv1.GuestNotAnsweringReason || !strings.Contains(ready.Message, "guest not answering") {
		t.Errorf("a guest gone silent: state %s, Ready %+v; want RUNNING, not answering, saying why", got.Status.State, ready)
	}
}
