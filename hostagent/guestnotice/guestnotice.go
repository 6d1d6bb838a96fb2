// Package guestnotice is the host agent's notice bus: what the guest link
// tells of each Dot's guest after every look at the Dot (whether it may be
// reached, at which proven target, and whether it is READY), and how the
// event pump, the deliverer and the guest endpoint hear of it.
package guestnotice

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
)

// Notice is what the guest link tells its listeners of one Dot's guest,
// each time it looks at the Dot: whether the Dot has a guest on this host
// that may be reached, and whether the READY procedure completed on it.
type Notice struct {
	Key types.NamespacedName
	// DotUID is the Dot's UID; empty when the Dot is gone.
	DotUID types.UID
	// Target is the guest: its QEMU, port and token. It is zero when the
	// Dot has no guest here to reach: its Computer is not RUNNING and
	// Ready, is another host's, or the Dot is gone or going.
	Target guestclient.Target
	// Ready: the READY procedure completed on this guest (the key and the
	// configuration reached it and the engine's health holds: AgentReady).
	Ready bool
}

// Listener hears of the guests of this host: the event pump starts and
// stops with them, the deliverer sends to the READY ones. GuestNotice is
// called from the reconciler's workers, in each Dot's order, again on every
// look (a listener acts on changes only); it must not block.
type Listener interface {
	GuestNotice(n Notice)
}

// Latest is a Listener for a loop of its own: it keeps the latest notice
// of each Dot until the loop takes it, and wakes the loop. The zero value
// is ready to use.
type Latest struct {
	mu     sync.Mutex
	latest map[types.NamespacedName]Notice
	wake   chan struct{}
}

// GuestNotice keeps n, over an earlier notice of the same Dot not taken yet.
func (l *Latest) GuestNotice(n Notice) {
	l.mu.Lock()
	if l.latest == nil {
		l.latest = map[types.NamespacedName]Notice{}
	}
	l.latest[n.Key] = n
	wake := l.wakeLocked()
	l.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// Wake receives after a notice came.
func (l *Latest) Wake() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wakeLocked()
}

func (l *Latest) wakeLocked() chan struct{} {
	if l.wake == nil {
		l.wake = make(chan struct{}, 1)
	}
	return l.wake
}

// Take returns the latest notice of each Dot heard of since the last Take.
func (l *Latest) Take() []Notice {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Notice, 0, len(l.latest))
	for _, n := range l.latest {
		out = append(out, n)
	}
	clear(l.latest)
	return out
}

// Bus tells each of its listeners, in order.
type Bus []Listener

// GuestNotice tells every listener of n.
func (b Bus) GuestNotice(n Notice) {
	for _, l := range b {
		l.GuestNotice(n)
	}
}
