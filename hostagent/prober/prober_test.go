package prober

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// guest answers health as told, and counts the probes.
type guest struct {
	mu     sync.Mutex
	err    error
	probes atomic.Int32
}

func (g *guest) set(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = err
}

func (g *guest) Health(context.Context, home.VMID, string) (protocol.HealthResponse, error) {
	g.probes.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return protocol.HealthResponse{}, g.err
	}
	return protocol.HealthResponse{Agentd: protocol.AgentdOK, RuntimeVersion: "r1"}, nil
}

var testKey = types.NamespacedName{Namespace: "team-a", Name: "helper"}

func testGuest(pid int) Guest {
	return Guest{Key: testKey, ID: home.VMID{Namespace: testKey.Namespace, Name: testKey.Name}, Token: "0123456789abcdef", PID: pid}
}

// started runs m until the test ends.
func started(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// update waits for the next enqueue, or fails.
func update(t *testing.T, m *Manager, why string) {
	t.Helper()
	select {
	case e := <-m.Updates():
		if e.Object.GetNamespace() != testKey.Namespace || e.Object.GetName() != testKey.Name {
			t.Fatalf("%s: enqueued %s/%s; want %s", why, e.Object.GetNamespace(), e.Object.GetName(), testKey)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no enqueue", why)
	}
}

// noUpdate fails when the Computer is enqueued within a few periods.
func noUpdate(t *testing.T, m *Manager, why string) {
	t.Helper()
	select {
	case <-m.Updates():
		t.Fatalf("%s: enqueued; want nothing", why)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestProberEnqueuesOnlyOnChange(t *testing.T) {
	g := &guest{err: errors.New("guest not answering")}
	m := New(g, 10*time.Millisecond)
	started(t, m)

	if r := m.Result(testKey, 7); !errors.Is(r.Err, ErrNotProbed) {
		t.Fatalf("before any probe: %v; want ErrNotProbed", r.Err)
	}
	m.Probe(testGuest(7))
	update(t, m, "the first result")
	if r := m.Result(testKey, 7); r.Err == nil || errors.Is(r.Err, ErrNotProbed) {
		t.Errorf("a silent guest: %v; want its error", r.Err)
	}
	noUpdate(t, m, "the same result again")
	if n := g.probes.Load(); n < 3 {
		t.Errorf("%d probes in 100 ms at a 10 ms period; want it probed on its cadence", n)
	}

	g.set(nil)
	update(t, m, "the guest came up")
	if r := m.Result(testKey, 7); r.Err != nil || r.Health.RuntimeVersion != "r1" {
		t.Errorf("an answering guest: %+v; want its answer", r)
	}
	if r := m.Result(testKey, 8); !errors.Is(r.Err, ErrNotProbed) {
		t.Errorf("another QEMU's result: %v; want ErrNotProbed", r.Err)
	}
	m.Probe(testGuest(7)) // the same guest again: nothing starts over
	noUpdate(t, m, "asked again for the same guest")
}

func TestProberForgetsAndFollowsANewQEMU(t *testing.T) {
	g := &guest{}
	m := New(g, 10*time.Millisecond)
	started(t, m)
	m.Probe(testGuest(7))
	update(t, m, "the first result")

	m.Probe(testGuest(9))
	update(t, m, "the new QEMU's first result")
	if r := m.Result(testKey, 9); r.Err != nil {
		t.Errorf("the new QEMU: %v; want its answer", r.Err)
	}

	m.Forget(testKey)
	if r := m.Result(testKey, 9); !errors.Is(r.Err, ErrNotProbed) {
		t.Errorf("after Forget: %v; want ErrNotProbed", r.Err)
	}
	before := g.probes.Load()
	time.Sleep(50 * time.Millisecond)
	if after := g.probes.Load(); after > before+1 {
		t.Errorf("%d probes after Forget; want the worker stopped", after-before)
	}
}

func TestProberAgentdNotOK(t *testing.T) {
	m := New(checkerFunc(func() (protocol.HealthResponse, error) {
		return protocol.HealthResponse{Agentd: "starting"}, nil
	}), 10*time.Millisecond)
	started(t, m)
	m.Probe(testGuest(7))
	update(t, m, "the first result")
	if r := m.Result(testKey, 7); r.Err == nil {
		t.Errorf("agentd %q: no error; want the guest not healthy", "starting")
	}
}

type checkerFunc func() (protocol.HealthResponse, error)

func (f checkerFunc) Health(context.Context, home.VMID, string) (protocol.HealthResponse, error) {
	return f()
}
