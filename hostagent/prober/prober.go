// Package prober probes the host's running guests off the Computer
// reconciler's path, in the shape of kubelet's prober and results manager:
// one worker per running guest asks dot-agentd's GET /v1/health on one
// cadence, the result is cached, and the guest's Computer is enqueued (a
// GenericEvent on Updates, for a controller-runtime source.Channel) only
// when the result changes. The reconciler reads the cached result and never
// waits for a guest.
package prober

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Defaults.
const (
	// DefaultStartingPeriod is the cadence of a guest's probe until it
	// first answers: a booting guest is seen answering within a quarter
	// of a second, so Ready follows its boot closely (a sleeping Dot's
	// answer waits on it). Once the guest's kernel is up, a probe before
	// dot-agentd listens is refused at once, so probing this often costs
	// a refused connection each time.
	DefaultStartingPeriod = 250 * time.Millisecond
	// DefaultAnsweredPeriod is the cadence once it answered: a guest that
	// stops answering is seen within 10 s, the running guest's cadence of
	// the Computer's reconcile, without asking a hundred guests ten times a
	// second (each answer wakes a guest that may run under tcg).
	DefaultAnsweredPeriod = 10 * time.Second
	// startingTimeout bounds a probe while the guest has not answered yet:
	// QEMU's user network holds a connection open until the guest listens,
	// and a new connection a period later is answered sooner than a held one.
	startingTimeout = time.Second
	// answeredTimeout bounds a probe of a guest that answered before.
	answeredTimeout = 5 * time.Second
)

// Checker asks a running VM's guest GET /v1/health through the proven
// channel: the driver's guest channel (driver.GuestChannel).
type Checker interface {
	Health(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error)
}

// Guest is one running guest to probe: its VM, its token and the QEMU the
// probes are of (a result is never read for another QEMU).
type Guest struct {
	Key   types.NamespacedName
	ID    home.VMID
	Token string
	// PID and Started name the QEMU.
	PID     int
	Started time.Time
}

// Result is a guest's latest probe.
type Result struct {
	// PID is the QEMU the probe was of.
	PID    int
	Health protocol.HealthResponse
	// Err is why the guest did not answer healthy; nil when it did.
	Err error
}

// ErrNotProbed is a guest's result before its first probe ended.
var ErrNotProbed = errors.New("not probed yet")

// Manager runs the workers and caches their results. Make it with New.
type Manager struct {
	checker Checker
	// starting and answered are the probe's cadences before and after the
	// guest's first answer.
	starting, answered time.Duration
	updates            chan event.GenericEvent

	mu      sync.Mutex
	ctx     context.Context
	stop    context.CancelFunc
	workers map[types.NamespacedName]*worker
	results map[types.NamespacedName]Result
}

type worker struct {
	guest  Guest
	cancel context.CancelFunc
	done   chan struct{}
}

// New makes a Manager probing with checker every period, before and after
// a guest's first answer (DefaultStartingPeriod, then DefaultAnsweredPeriod,
// when zero).
func New(checker Checker, period time.Duration) *Manager {
	starting, answered := period, period
	if period == 0 {
		starting, answered = DefaultStartingPeriod, DefaultAnsweredPeriod
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Manager{
		checker: checker, starting: starting, answered: answered,
		updates: make(chan event.GenericEvent, 1024),
		ctx:     ctx, stop: stop,
		workers: map[types.NamespacedName]*worker{},
		results: map[types.NamespacedName]Result{},
	}
}

// Updates receives a guest's Computer each time its result changes.
func (m *Manager) Updates() <-chan event.GenericEvent { return m.updates }

// NeedLeaderElection: every host agent probes its own guests.
func (m *Manager) NeedLeaderElection() bool { return false }

// Start holds the workers until ctx ends, then stops them all.
func (m *Manager) Start(ctx context.Context) error {
	<-ctx.Done()
	m.stop()
	m.mu.Lock()
	workers := m.workers
	m.workers = map[types.NamespacedName]*worker{}
	m.mu.Unlock()
	for _, w := range workers {
		<-w.done
	}
	return nil
}

// Probe makes sure the guest is probed: a worker starts for it unless one
// already probes the same QEMU (the worker of another QEMU of the Computer
// is stopped). It never waits.
func (m *Manager) Probe(g Guest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.workers[g.Key]; ok {
		if w.guest == g {
			return
		}
		w.cancel()
		delete(m.results, g.Key)
	}
	if m.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	w := &worker{guest: g, cancel: cancel, done: make(chan struct{})}
	m.workers[g.Key] = w
	go func() {
		defer close(w.done)
		m.run(ctx, w)
	}()
}

// Forget stops probing the Computer's guest and drops its result.
func (m *Manager) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.workers[key]; ok {
		w.cancel()
		delete(m.workers, key)
	}
	delete(m.results, key)
}

// Result is the latest probe of the Computer's guest of QEMU pid; Err is
// ErrNotProbed until one ended.
func (m *Manager) Result(key types.NamespacedName, pid int) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.results[key]
	if !ok || r.PID != pid {
		return Result{PID: pid, Err: ErrNotProbed}
	}
	return r
}

// run probes at once, then at the starting cadence until the guest first
// answers and at the answered one after, until ctx ends.
func (m *Manager) run(ctx context.Context, w *worker) {
	t := time.NewTimer(m.starting)
	defer t.Stop()
	answered := false
	for {
		timeout := startingTimeout
		if answered {
			timeout = answeredTimeout
		}
		r := m.probe(ctx, w.guest, timeout)
		if ctx.Err() != nil {
			return
		}
		answered = answered || r.Err == nil
		m.keep(w, r)
		if answered {
			t.Reset(m.answered)
		} else {
			t.Reset(m.starting)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Manager) probe(ctx context.Context, g Guest, timeout time.Duration) Result {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h, err := m.checker.Health(pctx, g.ID, g.Token)
	if err == nil && h.Agentd != protocol.AgentdOK {
		err = fmt.Errorf("dot-agentd answered health with agentd %q, not %q", h.Agentd, protocol.AgentdOK)
	}
	return Result{PID: g.PID, Health: h, Err: err}
}

// keep caches r and enqueues the Computer when it differs from the result
// before (a guest that came up or went silent, another answer, another
// reason).
func (m *Manager) keep(w *worker, r Result) {
	m.mu.Lock()
	if m.workers[w.guest.Key] != w {
		m.mu.Unlock()
		return // stopped meanwhile
	}
	prev, had := m.results[w.guest.Key]
	m.results[w.guest.Key] = r
	m.mu.Unlock()
	if had && same(prev, r) {
		return
	}
	key := w.guest.Key
	select {
	case m.updates <- event.GenericEvent{Object: &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
	default:
		// The queue is full: the Computer's own poll reads the result.
	}
}

func same(a, b Result) bool {
	if (a.Err == nil) != (b.Err == nil) || a.PID != b.PID {
		return false
	}
	if a.Err != nil {
		return a.Err.Error() == b.Err.Error()
	}
	return a.Health.Agentd == b.Health.Agentd && a.Health.RuntimeVersion == b.Health.RuntimeVersion
}
