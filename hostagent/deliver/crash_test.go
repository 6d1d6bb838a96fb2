package deliver

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// TestDelivererKilledBetweenSendAndAck: a deliverer killed after the guest
// took a row and before it acknowledged it delivered leaves the row "sent";
// the next deliverer (a restarted agent) sends it again with the same id,
// which the guest ignores as one it has seen, acknowledges it, and goes on
// with the rows behind it in order: nothing lost, nothing doubled.
func TestDelivererKilledBetweenSendAndAck(t *testing.T) {
	outbox := newFakeOutbox(row(protocol.InboundTaskCreated, "task-1", 0, nil), row(protocol.InboundUserMessage, "msg-1", 0, nil))
	guest := &fakeGuest{answers: map[string][]error{}}
	run := func(h *harness) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.d.Start(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start = %v; want nil when its context ends", err)
			}
		}
	}
	newHarness := func() *harness {
		h := &harness{t: t, clock: clocktesting.NewFakeClock(testNow), outbox: outbox, guest: guest}
		h.d = &Deliverer{Host: "h1", Outbox: outbox, Guest: guest.fns(), Clock: h.clock, Interval: 2 * time.Millisecond, Backstop: time.Hour, Log: logr.Discard()}
		return h
	}

	// The first deliverer dies right after the guest took task-1.
	var hits atomic.Int32
	died := make(chan struct{})
	remove := crashpoint.OnHit(crashpoint.DeliverSent, func() {
		if hits.Add(1) == 1 {
			close(died)
			runtime.Goexit()
		}
	})
	defer remove()
	first := newHarness()
	stop := run(first)
	first.ready(testTarget, true)
	select {
	case <-died:
	case <-time.After(5 * time.Second):
		t.Fatal("the deliverer did not reach " + crashpoint.DeliverSent)
	}
	stop()
	if diff := cmp.Diff([]string{"task-1 sent"}, outbox.takeAcks()); diff != "" {
		t.Fatalf("acknowledged before the kill -want +got:\n%s", diff)
	}

	second := newHarness()
	stop = run(second)
	second.ready(testTarget, true)
	second.settle()
	stop()
	if diff := cmp.Diff([]string{"task-1", "task-1", "msg-1"}, guest.takeSent()); diff != "" {
		t.Errorf("sent -want +got (task-1 again with its own id, then msg-1):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"task-1 sent", "task-1 delivered", "msg-1 sent", "msg-1 delivered"}, outbox.takeAcks()); diff != "" {
		t.Errorf("acknowledged after the restart -want +got:\n%s", diff)
	}
	for _, r := range outbox.rows {
		if r.state != wire.OutcomeDelivered {
			t.Errorf("row %s ends %q; want delivered", r.row.Event.ID, r.state)
		}
	}
}
