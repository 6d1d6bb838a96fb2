// Package crashpoint is the host agent's failpoints for its crash tests: the
// commit points where a kill -9 must lose nothing and double nothing (the
// pump between a stored batch and its cursor, the deliverer between a send
// and its ack, the READY procedure between the key and the config, the
// driver between QEMU's spawn and qemu.json, an image between its file and
// its manifest). A point costs one map read when no test armed it.
//
// A test arms a point in one of two ways, as the engine's crash tests do
// (guest/engine/daemon, INVISIBLE_DOTS_TEST_CRASH_AT): a subprocess started
// with Env naming the point kills itself with SIGKILL there; a test in
// process installs a function with OnHit (runtime.Goexit stops the goroutine
// exactly there, as if the process had died, and the test goes on with a new
// instance over what was left behind).
package crashpoint

import (
	"os"
	"sync"
	"syscall"
)

// Env names the commit point at which a process kills itself. No unit or
// command sets it.
const Env = "INVISIBLE_DOTS_TEST_HOST_CRASH_AT"

// The commit points.
const (
	// PumpStored: the control plane stored a batch (and its cursor, in the
	// same transaction); the pump has not taken the answer.
	PumpStored = "pump.stored"
	// DeliverSent: the guest took an inbound event; the deliverer has not
	// acknowledged it.
	DeliverSent = "deliver.sent"
	// ReadyKeyPushed: the READY procedure pushed the key and secrets; not
	// the config.
	ReadyKeyPushed = "ready.key-pushed"
	// QEMUSpawned: QEMU runs; its qemu.json is not written.
	QEMUSpawned = "qemu.spawned"
	// ImageFileWritten: an image's files are in images/; its manifest,
	// which registers it, is not.
	ImageFileWritten = "image.file-written"
)

var (
	armed = os.Getenv(Env)
	mu    sync.RWMutex
	hooks = map[string]func(){}
)

// Hit is a commit point. A process whose Env names it dies here; a hook
// installed for it runs.
func Hit(point string) {
	if armed == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	mu.RLock()
	f := hooks[point]
	mu.RUnlock()
	if f != nil {
		f()
	}
}

// OnHit runs f at every Hit of point until the returned function is called.
// For tests.
func OnHit(point string, f func()) (remove func()) {
	mu.Lock()
	hooks[point] = f
	mu.Unlock()
	return func() {
		mu.Lock()
		delete(hooks, point)
		mu.Unlock()
	}
}
