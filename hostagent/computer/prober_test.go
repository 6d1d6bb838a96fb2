package computer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	"github.com/invisible-dots/invisible-dots/hostagent/prober"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// gatedHealth holds every health call until gate is closed.
type gatedHealth struct {
	h    *fake.Host
	gate chan struct{}
}

func (g gatedHealth) Health(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return protocol.HealthResponse{}, ctx.Err()
	}
	return g.h.Health(ctx, id, token)
}

// probed waits until the prober enqueued the Computer with a result of
// QEMU pid that answers (or not, as want says), or fails.
func probed(t *testing.T, p *prober.Manager, pid int, answers bool) {
	t.Helper()
	key := client.ObjectKey{Namespace: "default", Name: "p"}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case <-p.Updates():
			if r := p.Result(key, pid); (r.Err == nil) == answers {
				return
			}
		case <-deadline:
			t.Fatalf("the prober enqueued no result that answers=%v", answers)
		}
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
	// The guest answers no probe until the test lets it.
	gate := make(chan struct{})
	p := prober.New(gatedHealth{h, gate}, 10*time.Millisecond)
	r.Prober = p
	ctx := t.Context()
	go func() { _ = p.Start(ctx) }()

	reconcileOnce(t, r, "p")
	got := getComputer(c, "p")
	if ready := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition); got.Status.State != dotsv1.ComputerStarting || ready == nil || ready.Reason != dotsv1.VMStartingReason {
		t.Fatalf("after the start, before a probe: state %s, Ready %+v; want STARTING", got.Status.State, ready)
	}
	if n := h.Calls("Health"); n > 0 {
		t.Errorf("%d health calls before the prober's; want none on the reconcile", n)
	}
	close(gate)
	probed(t, p, int(got.Status.PID), true)
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
	probed(t, p, int(got.Status.PID), false)
	reconcileOnce(t, r, "p")
	got = getComputer(c, "p")
	if ready := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition); got.Status.State != dotsv1.ComputerRunning || ready == nil || ready.Reason != dotsv1.GuestNotAnsweringReason || !strings.Contains(ready.Message, "guest not answering") {
		t.Errorf("a guest gone silent: state %s, Ready %+v; want RUNNING, not answering, saying why", got.Status.State, ready)
	}
}
