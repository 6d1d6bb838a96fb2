package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient/fakeguest"
	"github.com/invisible-dots/invisible-dots/hostagent/guestnotice"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
)

var (
	testKey    = types.NamespacedName{Namespace: "default", Name: "helper"}
	testTarget = guestclient.Target{Port: 40000, PID: 1001, Token: "0123456789abcdef0123456789abcdef"}
	otherQEMU  = guestclient.Target{Port: 40001, PID: 1002, Token: testTarget.Token}
	testNow    = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
)

const testUID = "uid-dot"

func TestClassify(t *testing.T) {
	tests := map[string]struct {
		reason   string
		err      error
		accepted bool
		want     lifecycle.Outcome
	}{
		"accepted":      {"202 {accepted: true}", nil, true, lifecycle.Delivered},
		"not accepted":  {"an answer that does not accept the event refuses it", nil, false, lifecycle.Refused},
		"invalid":       {"400 invalid: the guest refused it", &guestclient.StatusError{Status: 400, Code: protocol.ErrInvalid}, false, lifecycle.Refused},
		"agent away":    {"502 agent_unavailable: the engine did not listen behind dot-agentd", &guestclient.StatusError{Status: 502, Code: protocol.ErrAgentUnavailable}, false, lifecycle.NotListening},
		"engine failed": {"500: the engine's transaction failed, it did not accept the event", &guestclient.StatusError{Status: 500, Code: protocol.ErrInternal}, false, lifecycle.NotListening},
		"not answering": {"nothing inside the guest took the connection", fmt.Errorf("dial: %w", guestclient.ErrGuestNotAnswering), false, lifecycle.NotListening},
		"unproven":      {"the listener is not the guest: the event never left", fmt.Errorf("dial: %w", guestclient.ErrGuestUnproven), false, lifecycle.NotListening},
		"refused":       {"connection refused: nothing listened", fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), false, lifecycle.NotListening},
		"timeout":       {"no answer in time: it may have arrived", context.DeadlineExceeded, false, lifecycle.Unknown},
		"reset":         {"a reset connection: it may have arrived", fmt.Errorf("read: %w", syscall.ECONNRESET), false, lifecycle.Unknown},
		"cut":           {"the answer was cut: it may have arrived", io.ErrUnexpectedEOF, false, lifecycle.Unknown},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Classify(tc.err, protocol.Accepted{Accepted: tc.accepted}); got != tc.want {
				t.Errorf("%s\nClassify(%v) = %d; want %d", tc.reason, tc.err, got, tc.want)
			}
		})
	}
}

// fakeOutbox is a Dot's outbox as the Dots API keeps it. Named fake: no
// Dots API, no database.
type fakeOutbox struct {
	mu   sync.Mutex
	rows []*fakeRow
	acks []string
	// added counts the rows added since the start; changed is closed and
	// replaced at each.
	added   int
	changed chan struct{}
}

type fakeRow struct {
	row   wire.OutboxRow
	state wire.Outcome // "" while pending
}

func newFakeOutbox(rows ...wire.OutboxRow) *fakeOutbox {
	o := &fakeOutbox{changed: make(chan struct{})}
	for _, r := range rows {
		o.rows = append(o.rows, &fakeRow{row: r})
	}
	return o
}

func (o *fakeOutbox) Outbox(_ context.Context, host, ns, dot string) (wire.Outbox, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if host != "h1" || ns != testKey.Namespace || dot != testKey.Name {
		return wire.Outbox{}, fmt.Errorf("outbox of %s %s/%s; want the test's Dot", host, ns, dot)
	}
	out := wire.Outbox{DotUID: testUID}
	for _, r := range o.rows {
		if r.state == "" || r.state == wire.OutcomeSent || r.state == wire.OutcomeFailed {
			out.Rows = append(out.Rows, r.row)
		}
	}
	return out, nil
}

func (o *fakeOutbox) Ack(_ context.Context, _, _, _, id string, a wire.Ack) (wire.Acked, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acks = append(o.acks, id+" "+string(a.Outcome))
	if (a.Outcome == wire.OutcomeDelivered) != (a.At != nil) {
		// The deliverer says when the guest answered, and only then.
		return wire.Acked{}, &dotsclient.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidRequest,
			Message: fmt.Sprintf("outcome %s with at %v: only delivered, and always", a.Outcome, a.At)}
	}
	for _, r := range o.rows {
		if r.row.Event.ID != id {
			continue
		}
		if a.Outcome == wire.OutcomeSent && (r.state == wire.OutcomeDropped || r.state == wire.OutcomeDelivered) {
			return wire.Acked{}, &dotsclient.Error{Status: http.StatusConflict, Code: wire.CodeNotPending, Message: "dropped meanwhile"}
		}
		r.state = a.Outcome
		if a.Outcome == wire.OutcomeFailed {
			r.row.Failures++
			r.row.RetryAt = a.RetryAt
			r.row.LastError = a.Reason
		}
		return wire.Acked{ID: id, Outcome: a.Outcome, Failures: r.row.Failures}, nil
	}
	return wire.Acked{}, &dotsclient.Error{Status: http.StatusNotFound, Code: wire.CodeNotFound}
}

// WaitOutbox answers as the Dots API does: every Dot with rows at first,
// then the Dot each time rows were added since the cursor.
func (o *fakeOutbox) WaitOutbox(ctx context.Context, host, after string, wait time.Duration) (wire.OutboxChanges, error) {
	ref := wire.DotRef{Namespace: testKey.Namespace, Name: testKey.Name, UID: testUID}
	for {
		o.mu.Lock()
		n, changed := o.added, o.changed
		o.mu.Unlock()
		cursor := fmt.Sprintf("fake:%d", n)
		if after == "" {
			return wire.OutboxChanges{Cursor: cursor, Dots: []wire.DotRef{ref}}, nil
		}
		if after != cursor {
			return wire.OutboxChanges{Cursor: cursor, Complete: true, Dots: []wire.DotRef{ref}}, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return wire.OutboxChanges{}, ctx.Err()
		}
	}
}

// add enqueues a row, as a decision of the control plane does.
func (o *fakeOutbox) add(r wire.OutboxRow) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rows = append(o.rows, &fakeRow{row: r})
	o.added++
	close(o.changed)
	o.changed = make(chan struct{})
}

// drop drops a row as a cancel does.
func (o *fakeOutbox) drop(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.rows {
		if r.row.Event.ID == id {
			r.state = wire.OutcomeDropped
		}
	}
}

func (o *fakeOutbox) takeAcks() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.acks
	o.acks = nil
	return out
}

// fakeGuest answers each send of an id with the next of its answers (nil
// accepts), and records every send.
type fakeGuest struct {
	mu      sync.Mutex
	answers map[string][]error
	sent    []string
	target  []guestclient.Target
}

func (g *fakeGuest) fns() fakeguest.GuestFns {
	return fakeguest.GuestFns{EventsFn: func(_ context.Context, t guestclient.Target, ev protocol.InboundEvent) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.sent = append(g.sent, ev.ID)
		g.target = append(g.target, t)
		if a := g.answers[ev.ID]; len(a) > 0 {
			g.answers[ev.ID] = a[1:]
			return a[0]
		}
		return nil
	}}
}

func (g *fakeGuest) takeSent() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.sent
	g.sent = nil
	return out
}

func row(typ, id string, failures int, retryAt *time.Time) wire.OutboxRow {
	data := map[string]string{
		protocol.InboundTaskCreated:      `{"task_id":"t","description":"d","priority":0}`,
		protocol.InboundUserMessage:      `{"text":"hi"}`,
		protocol.InboundApprovalReceived: `{"approval_id":"a","decision":"approve"}`,
	}[typ]
	r := wire.OutboxRow{Event: protocol.InboundEvent{ID: id, Type: typ, TS: testNow.Format(time.RFC3339Nano), Data: json.RawMessage(data)},
		Failures: failures, RetryAt: retryAt}
	if typ == protocol.InboundTaskCreated {
		r.TaskUID, r.Run = "t", 1
	}
	return r
}

var (
	invalid      = &guestclient.StatusError{Method: http.MethodPost, Path: "/v1/agent/events", Status: 400, Code: protocol.ErrInvalid, Message: "the guest's own words"}
	notListening = fmt.Errorf("dial: %w", guestclient.ErrGuestNotAnswering)
	cut          = io.ErrUnexpectedEOF
)

// harness runs a Deliverer over the fakes.
type harness struct {
	t      *testing.T
	d      *Deliverer
	clock  *clocktesting.FakeClock
	outbox *fakeOutbox
	guest  *fakeGuest
}

func (h *harness) ready(target guestclient.Target, ready bool) {
	h.d.GuestNotice(guestnotice.Notice{Key: testKey, DotUID: testUID, Target: target, Ready: ready})
}

// settle lets the deliverer's passes run until nothing more happens for a
// while (many intervals).
func (h *harness) settle() {
	count := func() int {
		h.outbox.mu.Lock()
		defer h.outbox.mu.Unlock()
		return len(h.outbox.acks)
	}
	last, quiet := count(), time.Now()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if n := count(); n != last {
			last, quiet = n, time.Now()
		} else if time.Since(quiet) > 40*time.Millisecond {
			return
		}
	}
}

func TestDeliverer(t *testing.T) {
	later := testNow.Add(time.Minute)
	tests := map[string]struct {
		reason  string
		rows    []wire.OutboxRow
		answers map[string][]error
		// before readies the harness before the deliverer starts; run
		// drives the deliverer; what it sent and acknowledged is checked at
		// the end.
		before    func(h *harness)
		run       func(h *harness)
		wantSent  []string
		wantAcks  []string
		wantState map[string]wire.Outcome
	}{
		"in order, each acknowledged": {
			reason: "a READY Dot's rows go in order: each marked sent before it is sent, then delivered",
			rows:   []wire.OutboxRow{row(protocol.InboundTaskCreated, "task-1", 0, nil), row(protocol.InboundUserMessage, "msg-1", 0, nil)},
			run: func(h *harness) {
				h.ready(testTarget, true)
				h.settle()
			},
			wantSent: []string{"task-1", "msg-1"},
			wantAcks: []string{"task-1 sent", "task-1 delivered", "msg-1 sent", "msg-1 delivered"},
		},
		"not READY": {
			reason: "a Dot whose guest is there but not READY is sent nothing; nor is one without a guest",
			rows:   []wire.OutboxRow{row(protocol.InboundUserMessage, "msg-1", 0, nil)},
			run: func(h *harness) {
				h.ready(testTarget, false)
				h.settle()
				h.d.GuestNotice(guestnotice.Notice{Key: testKey})
				h.settle()
			},
		},
		"an unknown outcome is sent again, uncounted": {
			reason:  "a cut answer may have reached the guest: the row goes again with the same id, no failure is recorded, and the next waits for it",
			rows:    []wire.OutboxRow{row(protocol.InboundTaskCreated, "task-1", 0, nil), row(protocol.InboundUserMessage, "msg-1", 0, nil)},
			answers: map[string][]error{"task-1": {cut}},
			run: func(h *harness) {
				h.ready(testTarget, true)
				h.settle()
				h.clock.Step(2 * time.Second)
				h.settle()
			},
			wantSent: []string{"task-1", "task-1", "msg-1"},
			wantAcks: []string{"task-1 sent", "task-1 sent", "task-1 delivered", "msg-1 sent", "msg-1 delivered"},
		},
		"nothing overtakes a failure": {
			reason:  "a known failure is counted with its retry time; the rows behind it wait until it goes",
			rows:    []wire.OutboxRow{row(protocol.InboundApprovalReceived, "decision-1", 0, nil), row(protocol.InboundUserMessage, "msg-1", 0, nil)},
			answers: map[string][]error{"decision-1": {notListening}},
			run: func(h *harness) {
				h.ready(testTarget, true)
				h.settle()
				if sent := h.guest.takeSent(); !cmp.Equal(sent, []string{"decision-1"}) {
					h.t.Errorf("before the retry time: sent %v; want the failed row alone", sent)
				}
				h.clock.Step(time.Minute)
				h.settle()
			},
			wantSent: []string{"decision-1", "msg-1"},
			wantAcks: []string{"decision-1 sent", "decision-1 failed", "decision-1 sent", "decision-1 delivered", "msg-1 sent", "msg-1 delivered"},
		},
		"a refused task.created gives its task up": {
			reason:  "one refusal gives a task up: the row is acknowledged given_up (its task FAILED) and the next row goes on the next pass",
			rows:    []wire.OutboxRow{row(protocol.InboundTaskCreated, "task-1", 0, nil), row(protocol.InboundUserMessage, "msg-1", 0, nil)},
			answers: map[string][]error{"task-1": {invalid}},
			run: func(h *harness) {
				h.ready(testTarget, true)
				h.settle()
			},
			wantSent:  []string{"task-1", "msg-1"},
			wantAcks:  []string{"task-1 sent", "task-1 given_up", "msg-1 sent", "msg-1 delivered"},
			wantState: map[string]wire.Outcome{"task-1": wire.OutcomeGivenUp},
		},
		"three known failures give a task up": {
			reason:  "a task.created that nothing took, three times, is given up",
			rows:    []wire.OutboxRow{row(protocol.InboundTaskCreated, "task-1", 0, nil)},
			answers: map[string][]error{"task-1": {notListening, notListening, notListening}},
			run: func(h *harness) {
				h.ready(testTarget, true)
				for range 3 {
					h.settle()
					h.clock.Step(time.Minute)
				}
				h.settle()
			},
			wantSent: []string{"task-1", "task-1", "task-1"},
			wantAcks: []string{"task-1 sent", "task-1 failed", "task-1 sent", "task-1 failed", "task-1 sent", "task-1 given_up"},
		},
		"a refused message waits for the next READY": {
			reason:  "a message is never given up: refused, it is not sent again until the Dot is READY again, then it goes",
			rows:    []wire.OutboxRow{row(protocol.InboundUserMessage, "msg-1", 0, nil)},
			answers: map[string][]error{"msg-1": {invalid}},
			run: func(h *harness) {
				h.ready(testTarget, true)
				h.settle()
				h.clock.Step(time.Hour)
				h.settle()
				if sent := h.guest.takeSent(); !cmp.Equal(sent, []string{"msg-1"}) {
					h.t.Errorf("before the next READY: sent %v; want the one refused send", sent)
				}
				h.ready(testTarget, false)
				h.settle()
				h.ready(testTarget, true)
				h.settle()
			},
			wantSent: []string{"msg-1"},
			wantAcks: []string{"msg-1 sent", "msg-1 failed", "msg-1 sent", "msg-1 delivered"},
		},
		"every READY sends again": {
			reason:  "a row whose retry time has not come goes at once when the Dot turns READY (a new QEMU here), to the new guest",
			rows:    []wire.OutboxRow{row(protocol.InboundUserMessage, "msg-1", 2, &later)},
			answers: map[string][]error{"msg-1": {notListening}},
			run: func(h *harness) {
				h.ready(testTarget, true)
				h.settle()
				h.ready(otherQEMU, true)
				h.settle()
				h.guest.mu.Lock()
				defer h.guest.mu.Unlock()
				if diff := cmp.Diff([]guestclient.Target{testTarget, otherQEMU}, h.guest.target); diff != "" {
					h.t.Errorf("the guests sent to -want +got:\n%s", diff)
				}
			},
			wantSent: []string{"msg-1", "msg-1"},
			wantAcks: []string{"msg-1 sent", "msg-1 failed", "msg-1 sent", "msg-1 delivered"},
		},
		"a new row goes at once": {
			reason: "a row enqueued for a READY Dot whose rows all went is sent when the host's outbox tells of it, not at the backstop's pass (the clock does not move here)",
			rows:   []wire.OutboxRow{row(protocol.InboundUserMessage, "msg-1", 0, nil)},
			run: func(h *harness) {
				for deadline := time.Now().Add(2 * time.Second); !h.d.following.Load() && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				h.ready(testTarget, true)
				h.settle()
				h.outbox.add(row(protocol.InboundUserMessage, "msg-2", 0, nil))
				h.settle()
				h.outbox.add(row(protocol.InboundApprovalReceived, "decision-1", 0, nil))
				h.settle()
			},
			wantSent: []string{"msg-1", "msg-2", "decision-1"},
			wantAcks: []string{"msg-1 sent", "msg-1 delivered", "msg-2 sent", "msg-2 delivered", "decision-1 sent", "decision-1 delivered"},
		},
		"a new row does not overtake a held one": {
			reason:  "a row enqueued behind one held for its retry time waits for it",
			rows:    []wire.OutboxRow{row(protocol.InboundApprovalReceived, "decision-1", 0, nil)},
			answers: map[string][]error{"decision-1": {notListening}},
			run: func(h *harness) {
				h.ready(testTarget, true)
				h.settle()
				h.outbox.add(row(protocol.InboundUserMessage, "msg-1", 0, nil))
				h.settle()
				if sent := h.guest.takeSent(); !cmp.Equal(sent, []string{"decision-1"}) {
					h.t.Errorf("before the retry time: sent %v; want the failed row alone", sent)
				}
				h.clock.Step(time.Minute)
				h.settle()
			},
			wantSent: []string{"decision-1", "msg-1"},
			wantAcks: []string{"decision-1 sent", "decision-1 failed", "decision-1 sent", "decision-1 delivered", "msg-1 sent", "msg-1 delivered"},
		},
		"a row a cancel dropped is not sent": {
			reason: "the send of a row dropped meanwhile does not begin; the rows behind it go",
			rows:   []wire.OutboxRow{row(protocol.InboundTaskCreated, "task-1", 0, nil), row(protocol.InboundUserMessage, "msg-1", 0, nil)},
			before: func(h *harness) {
				// The deliverer read the outbox just before the cancel
				// dropped the task's row.
				listed, _ := h.outbox.Outbox(context.Background(), "h1", testKey.Namespace, testKey.Name)
				h.outbox.drop("task-1")
				h.d.Outbox = &listedFirst{fakeOutbox: h.outbox, rows: listed.Rows}
			},
			run: func(h *harness) {
				h.ready(testTarget, true)
				h.settle()
			},
			wantSent: []string{"msg-1"},
			wantAcks: []string{"task-1 sent", "msg-1 sent", "msg-1 delivered"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			answers := map[string][]error{}
			for k, v := range tc.answers {
				answers[k] = v
			}
			h := &harness{t: t, clock: clocktesting.NewFakeClock(testNow), outbox: newFakeOutbox(tc.rows...), guest: &fakeGuest{answers: answers}}
			h.d = &Deliverer{Host: "h1", Outbox: h.outbox, Guest: h.guest.fns(), Clock: h.clock, Interval: 2 * time.Millisecond, Backstop: time.Hour, Log: logr.Discard()}
			if tc.before != nil {
				tc.before(h)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- h.d.Start(ctx) }()
			tc.run(h)
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start = %v; want nil when its context ends", err)
			}
			if diff := cmp.Diff(tc.wantSent, h.guest.takeSent()); diff != "" {
				t.Errorf("%s\nsent (after what run checked itself) -want +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.wantAcks, h.outbox.takeAcks()); diff != "" {
				t.Errorf("%s\nacknowledgements -want +got:\n%s", tc.reason, diff)
			}
			for id, want := range tc.wantState {
				for _, r := range h.outbox.rows {
					if r.row.Event.ID == id && r.state != want {
						t.Errorf("%s\nrow %s ends %q; want %q", tc.reason, id, r.state, want)
					}
				}
			}
		})
	}
}

// listedFirst answers the first read of the outbox with rows as listed
// before a cancel dropped one, then reads the outbox as it is.
type listedFirst struct {
	*fakeOutbox
	rows []wire.OutboxRow
}

func (l *listedFirst) Outbox(ctx context.Context, host, ns, dot string) (wire.Outbox, error) {
	if l.rows != nil {
		rows := l.rows
		l.rows = nil
		return wire.Outbox{DotUID: testUID, Rows: rows}, nil
	}
	return l.fakeOutbox.Outbox(ctx, host, ns, dot)
}

func TestReasonKeepsTheGuestsWordsOut(t *testing.T) {
	for _, err := range []error{invalid, &guestclient.StatusError{Status: 500, Code: "x", Message: "sk-or-secret in a trace"}} {
		got := Reason(protocol.InboundTaskCreated, Classify(err, protocol.Accepted{}), err, time.Second)
		if strings.Contains(got, "the guest's own words") || strings.Contains(got, "sk-or-secret") {
			t.Errorf("Reason(%v) = %q; want the route, status and code only", err, got)
		}
		if !strings.Contains(got, "POST /v1/agent/events") {
			t.Errorf("Reason(%v) = %q; want the route named", err, got)
		}
	}
	if !errors.Is(notListening, guestclient.ErrGuestNotAnswering) {
		t.Fatal("the test's notListening is not ErrGuestNotAnswering")
	}
}
