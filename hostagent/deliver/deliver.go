// Package deliver is the host agent's deliverer (ref 9.2): for each Dot of
// its host that is READY, it reads the Dot's pending outbox rows in order
// through the Dots API, sends each to the guest (POST /v1/agent/events, the
// row's InboundEvent) and acknowledges what became of the send through the
// same API. The rule for each outcome is lifecycle.AfterSend:
//
//   - the send is acknowledged as begun before it is made, and a row a
//     cancel dropped meanwhile is not sent;
//   - 202 is delivered;
//   - an unknown outcome (a timeout, a reset connection) may have reached
//     the guest: the row is sent again with the same id, which the guest
//     ignores when it has it, and it does not count;
//   - a known failure (the guest refused the event, or nothing listened)
//     counts; a task.created given up (three of them, or one refusal) is
//     acknowledged given_up, which fails its task; a message or a decision
//     is never given up and waits for the next READY;
//   - the Dot's sending stops at the first row that is not delivered, so
//     nothing overtakes it.
//
// Every READY transition sends the Dot's pending rows again, whatever their
// retry time. A new row is heard of at once: the deliverer long-polls the
// host's outbox route (wire.HostOutboxPath), which the Dots API answers
// when a transaction that enqueued a row of one of the host's Dots commits,
// and the Dot's worker passes over its outbox then. Rows held for a retry
// time are looked at every Interval; a READY Dot with nothing held is read
// again every Backstop even when nothing was heard (a lost notification, a
// server that does not send them: then every Interval). A Dot that is not READY (asleep, starting) is not the
// deliverer's to wake: the central power controller wakes a Dot whose outbox
// has rows.
package deliver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestnotice"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
)

// Sender sends an event to a guest's engine: *guestclient.Client's Agent.
type Sender interface {
	Agent(ctx context.Context, t guestclient.Target, method, sub string, in, out any) error
}

// Outbox reads and acknowledges a Dot's outbox rows: the Dots API client.
type Outbox interface {
	Outbox(ctx context.Context, host, namespace, dot string) (wire.Outbox, error)
	Ack(ctx context.Context, host, namespace, dot, id string, ack wire.Ack) (wire.Acked, error)
	WaitOutbox(ctx context.Context, host, after string, wait time.Duration) (wire.OutboxChanges, error)
}

// Defaults.
const (
	// DefaultInterval is how often a Dot's hold (a retry time) is looked
	// at, and the periodic pass over a READY Dot's outbox while the host's
	// outbox cannot be followed.
	DefaultInterval = time.Second
	// DefaultBackstop is the pass over a READY Dot's outbox with nothing
	// held and nothing heard.
	DefaultBackstop = 30 * time.Second
	// outboxWait is the long poll's wait, under wire.MaxOutboxWait.
	outboxWait = 25 * time.Second
	// DefaultSendTimeout bounds one send; past it the outcome is unknown.
	DefaultSendTimeout = 10 * time.Second
)

// Deliverer sends the outbox rows of its host's READY Dots to their guests.
// It is a guestnotice.Listener (the READY transitions) and a manager Runnable
// (one loop, and one worker per Dot with a guest, so a slow guest holds up
// no other Dot).
type Deliverer struct {
	Host   string
	Guest  Sender
	Outbox Outbox
	Clock  clock.PassiveClock
	// Interval, Backstop and SendTimeout are the defaults above when zero.
	Interval    time.Duration
	Backstop    time.Duration
	SendTimeout time.Duration
	Log         logr.Logger

	// Latest is where the guest link's notices wait for the loop.
	guestnotice.Latest
	// following says the host's outbox is followed: the last long poll
	// was answered.
	following atomic.Bool
}

var _ guestnotice.Listener = (*Deliverer)(nil)

// NeedLeaderElection: every host agent delivers to its own guests.
func (d *Deliverer) NeedLeaderElection() bool { return false }

// Start delivers until ctx ends.
func (d *Deliverer) Start(ctx context.Context) error {
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
	workers := map[types.NamespacedName]*worker{}
	heard := make(chan []wire.DotRef)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		d.watch(ctx, heard)
	}()
	defer func() {
		for _, w := range workers {
			w.cancel()
		}
		for _, w := range workers {
			<-w.done
		}
		<-watched
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case dots := <-heard:
			for _, ref := range dots {
				if w := workers[types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}]; w != nil {
					w.nudge()
				}
			}
			continue
		case <-d.Wake():
		}
		for _, n := range d.Take() {
			w := workers[n.Key]
			if n.Target == (guestclient.Target{}) {
				// No guest to send to: the Computer stopped, moved or went.
				if w != nil {
					w.cancel()
					delete(workers, n.Key)
				}
				continue
			}
			if w == nil {
				w = d.startWorker(ctx, n.Key)
				workers[n.Key] = w
			}
			w.hear(n)
		}
	}
}

// worker sends one Dot's rows.
type worker struct {
	key    types.NamespacedName
	cancel context.CancelFunc
	done   chan struct{}
	// wake tells the loop of a READY transition; rows, of new rows.
	wake chan struct{}
	rows chan struct{}

	mu sync.Mutex
	// guest is the Dot's guest as last heard.
	guest guestState
}

// guestState is what the worker knows of the Dot's guest.
type guestState struct {
	uid    types.UID
	target guestclient.Target
	ready  bool
	// epoch counts the READY transitions: each sends the Dot's rows again.
	epoch int
}

func (d *Deliverer) startWorker(ctx context.Context, key types.NamespacedName) *worker {
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{key: key, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1), rows: make(chan struct{}, 1)}
	go func() {
		defer close(w.done)
		d.loop(wctx, w)
	}()
	return w
}

// hear takes a notice: a READY that was not (or of another guest) is a
// transition, and wakes the loop.
func (w *worker) hear(n guestnotice.Notice) {
	w.mu.Lock()
	s := w.guest
	transition := n.Ready && (!s.ready || s.target != n.Target || s.uid != n.DotUID)
	if transition {
		s.epoch++
	}
	s.uid, s.target, s.ready = n.DotUID, n.Target, n.Ready
	w.guest = s
	w.mu.Unlock()
	if transition {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// nudge tells the loop the Dot has new rows.
func (w *worker) nudge() {
	select {
	case w.rows <- struct{}{}:
	default:
	}
}

func (w *worker) state() guestState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.guest
}

// loop passes over the Dot's outbox at each READY transition, when new
// rows are heard of, and when its hold is over (looked at every Interval).
func (d *Deliverer) loop(ctx context.Context, w *worker) {
	log := d.Log.WithValues("dot", w.key.String())
	tick := time.NewTicker(cmp.Or(d.Interval, DefaultInterval))
	defer tick.Stop()
	var (
		passed int  // the epoch of the last pass
		h      hold = held{}
	)
	for {
		nudged := false
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-w.rows:
			nudged = true
		case <-tick.C:
		}
		s := w.state()
		_, refused := h.(untilReady)
		switch {
		case !s.ready:
		case s.epoch != passed:
			passed = s.epoch
			h = d.pass(ctx, log, w.key, s, true)
		case nudged && !refused, h.over(d.Clock.Now()):
			// A new row queues behind a held one, which the pass
			// finds first: nothing overtakes it.
			h = d.pass(ctx, log, w.key, s, false)
		}
	}
}

// watch long-polls the host's outbox and hands out the Dots heard of. While
// the route fails, the workers fall back to a pass every Interval.
func (d *Deliverer) watch(ctx context.Context, heard chan<- []wire.DotRef) {
	cursor, backoff, told := "", time.Second, false
	for ctx.Err() == nil {
		changes, err := d.Outbox.WaitOutbox(ctx, d.Host, cursor, outboxWait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.following.Store(false)
			if !told {
				told = true
				d.Log.Info("the host's outbox cannot be followed; each READY Dot's outbox is read every interval instead", "interval", cmp.Or(d.Interval, DefaultInterval), "err", err.Error())
			}
			if dotsclient.CodeOf(err) == wire.CodeNotImplemented {
				return // this server does not notify: the passes do
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		d.following.Store(true)
		cursor, backoff, told = changes.Cursor, time.Second, false
		if len(changes.Dots) == 0 {
			continue
		}
		select {
		case heard <- changes.Dots:
		case <-ctx.Done():
			return
		}
	}
}

// hold is what keeps a Dot's rows from being sent until a time, or until
// the next READY.
type hold interface {
	over(now time.Time) bool
}

// held is no hold.
type held struct{}

func (held) over(time.Time) bool { return true }

// quiet is a Dot whose rows all went: the next pass is at new rows, or at a
// time as a backstop.
type quiet time.Time

func (q quiet) over(now time.Time) bool { return !now.Before(time.Time(q)) }

// until holds the rows until a time: an unknown outcome is sent again a
// little later, in memory (it is not a failure, so nothing is stored).
type until time.Time

func (u until) over(now time.Time) bool { return !now.Before(time.Time(u)) }

// untilReady holds the rows until the next READY: a message or a decision
// the guest refused is never given up (ref 9.2).
type untilReady struct{}

func (untilReady) over(time.Time) bool { return false }

// pass sends the Dot's pending rows in order, and stops at the first that
// is not delivered. A forced pass (a READY transition) sends rows whose
// retry time has not come, too.
func (d *Deliverer) pass(ctx context.Context, log logr.Logger, key types.NamespacedName, s guestState, force bool) hold {
	ob, err := d.Outbox.Outbox(ctx, d.Host, key.Namespace, key.Name)
	if err != nil {
		if ctx.Err() == nil {
			log.Info("the Dot's outbox cannot be read; the next pass tries again", "err", err.Error())
		}
		return held{}
	}
	if ob.DotUID != string(s.uid) {
		// Another Dot of the name since: its guest's notice comes.
		return held{}
	}
	for _, row := range ob.Rows {
		now := d.Clock.Now()
		if !force && row.RetryAt != nil && row.RetryAt.After(now) {
			return until(*row.RetryAt)
		}
		if h, next := d.send(ctx, log, key, s.target, row); !next {
			return h
		}
	}
	if !d.following.Load() {
		return held{}
	}
	return quiet(d.Clock.Now().Add(cmp.Or(d.Backstop, DefaultBackstop)))
}

// send sends one row and acknowledges what became of it. next says whether
// the pass goes on to the next row.
func (d *Deliverer) send(ctx context.Context, log logr.Logger, key types.NamespacedName, t guestclient.Target, row wire.OutboxRow) (hold, bool) {
	id := row.Event.ID
	ack := func(a wire.Ack) error {
		_, err := d.Outbox.Ack(ctx, d.Host, key.Namespace, key.Name, id, a)
		if err != nil && ctx.Err() == nil {
			log.Info("an outbox acknowledgement was not taken; the row is sent again later", "row", id, "outcome", a.Outcome, "err", err.Error())
		}
		return err
	}
	if err := ack(wire.Ack{Outcome: wire.OutcomeSent}); err != nil {
		if dotsclient.CodeOf(err) == wire.CodeNotPending {
			return held{}, true // a cancel dropped it meanwhile: never sent
		}
		return held{}, false
	}
	timeout := cmp.Or(d.SendTimeout, DefaultSendTimeout)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	var accepted protocol.Accepted
	began := d.Clock.Now()
	err := d.Guest.Agent(sctx, t, http.MethodPost, protocol.RouteEvents, row.Event, &accepted)
	answered := d.Clock.Now()
	took := answered.Sub(began)
	cancel()
	if ctx.Err() != nil {
		return held{}, false // the agent stops: the next one sends it again
	}
	outcome := Classify(err, accepted)
	rule := lifecycle.AfterSend(lifecycle.Kind(row.Event.Type), outcome, row.Failures)
	now := d.Clock.Now()
	reason := Reason(row.Event.Type, outcome, err, timeout)
	switch rule.Action {
	case lifecycle.MarkDelivered:
		// The guest has it; a deliverer killed before the ack below sends
		// the row again with the same id (it is still "sent"), and the
		// guest ignores an id it has seen (ref 5.4).
		crashpoint.Hit(crashpoint.DeliverSent)
		// took is the guest's share of a delivery: under tcg most of a
		// chat's time before the model (BenchmarkDotChat).
		log.V(1).Info("delivered", "row", id, "type", row.Event.Type, "took", took)
		if ack(wire.Ack{Outcome: wire.OutcomeDelivered, At: &answered}) != nil {
			// The guest has it; sent again later, it ignores the repeat.
			return held{}, false
		}
		return held{}, true
	case lifecycle.Resend:
		log.Info("the outcome of a send is unknown; it is sent again with the same id", "row", id, "reason", reason)
		return until(now.Add(rule.RetryAfter)), false
	case lifecycle.CountFailure:
		retryAt := now.Add(rule.RetryAfter)
		log.Info("a send failed; it is sent again later", "row", id, "reason", reason, "failures", row.Failures+1, "retryAt", retryAt)
		_ = ack(wire.Ack{Outcome: wire.OutcomeFailed, Reason: reason, RetryAt: &retryAt})
		return until(retryAt), false
	case lifecycle.GiveUpTask:
		log.Info("a task is given up: its task.created could not be delivered", "row", id, "task", row.TaskUID, "reason", reason)
		_ = ack(wire.Ack{Outcome: wire.OutcomeGivenUp, Reason: reason})
		return held{}, false
	case lifecycle.WaitForReady:
		log.Info("the guest refused an event; it waits for the next READY", "row", id, "reason", reason)
		_ = ack(wire.Ack{Outcome: wire.OutcomeFailed, Reason: reason, RetryAt: &now})
		return untilReady{}, false
	}
	return held{}, false
}

// Classify is what the deliverer makes of a send's answer (ref 9.2): 202
// with accepted is delivered; an answer of 4xx (or a 2xx that does not
// accept) is the guest's refusal; a 5xx is a known failure too (502: the
// engine did not listen behind dot-agentd; another: its transaction failed,
// so it did not accept the event); a connection that nothing took, or whose
// listener did not prove it is the guest, is nothing listening; anything
// else (a timeout, a reset, a connection cut) leaves the outcome unknown.
func Classify(err error, accepted protocol.Accepted) lifecycle.Outcome {
	var se *guestclient.StatusError
	switch {
	case err == nil && accepted.Accepted:
		return lifecycle.Delivered
	case err == nil:
		return lifecycle.Refused
	case errors.As(err, &se) && se.Status >= 400 && se.Status < 500:
		return lifecycle.Refused
	case errors.As(err, &se):
		return lifecycle.NotListening
	case errors.Is(err, guestclient.ErrGuestNotAnswering), errors.Is(err, guestclient.ErrGuestUnproven), errors.Is(err, syscall.ECONNREFUSED):
		return lifecycle.NotListening
	}
	return lifecycle.Unknown
}

// Reason words a send that was not delivered, by route, status and code
// only (never the guest's text, ref 4.3).
func Reason(eventType string, outcome lifecycle.Outcome, err error, timeout time.Duration) string {
	what := "the guest did not take " + eventType
	switch outcome {
	case lifecycle.Refused:
		what = "the guest refused " + eventType
	case lifecycle.Unknown:
		what = "the outcome of sending " + eventType + " is unknown"
	}
	if err == nil {
		return what + fmt.Sprintf(" (%s %s: answered without accepting it)", http.MethodPost, protocol.AgentRoutePrefix+protocol.RouteEvents)
	}
	return guestclient.DescribeFailure(what, http.MethodPost, protocol.RouteEvents, err, timeout)
}
