package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"
)

const (
	// lockCheckInterval is how often the watcher asks the control-plane
	// lock's session whether it is still there. An external server that
	// restarted, or a network that cut the session, loses the lock with
	// it; the next check takes it again.
	lockCheckInterval = 2 * time.Second
	// restartBackoffMax bounds the wait between two tries at bringing the
	// database back (a full disk, a server still going down).
	restartBackoffMax = 10 * time.Second
)

// ErrLockTaken is what Failed carries when another control plane took the
// database's lock while this one had lost its session: two control planes
// must never reconcile the same Dots, so this one has to stop.
var ErrLockTaken = errors.New("another invisible-dots control plane took the database while this one was cut off from it")

// Failed delivers an error when the database cannot be kept for this
// control plane (ErrLockTaken); the server then stops. A PostgreSQL that
// dies, or a session that is cut, is not a failure: the watcher brings them
// back and says so in the log.
func (i *Instance) Failed() <-chan error { return i.failed }

// Recoveries counts the managed server's restarts and the lock's retakes
// since Start, for tests and figures.
func (i *Instance) Recoveries() (restarts, lockRetaken int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.restarts, i.lockRetaken
}

// ManagedPID is the managed server's postmaster, 0 for an external one.
func (i *Instance) ManagedPID() int {
	if m := i.current(); m != nil && m.cmd != nil && m.cmd.Process != nil {
		return m.cmd.Process.Pid
	}
	return 0
}

func (i *Instance) startWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	i.mu.Lock()
	i.stopWatch, i.watchDone = cancel, make(chan struct{})
	i.mu.Unlock()
	go i.watch(ctx)
}

// endWatch stops the watcher and waits for it; a restart it has under way
// is cut short (its half-started server is stopped by the restart itself).
func (i *Instance) endWatch() {
	i.mu.Lock()
	cancel, done := i.stopWatch, i.watchDone
	i.stopWatch = nil
	i.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// watch keeps the database up for the control plane until ctx ends: the
// managed server's exit is noticed at once and the server started again on
// the same socket, so the connection pool, kine and every listener
// reconnect to the same address by themselves; the lock's session is
// checked every lockCheckInterval and taken again when lost. Nothing is
// lost meanwhile: every writer of the log retries a failed write (the
// pump's cursor and the deliverer's acknowledgements move only after a
// commit), and stream clients resume with Last-Event-ID.
func (i *Instance) watch(ctx context.Context) {
	defer close(i.watchDone)
	tick := time.NewTicker(lockCheckInterval)
	defer tick.Stop()
	for {
		var exited <-chan struct{}
		m := i.current()
		if m != nil {
			exited = m.exited
		}
		select {
		case <-ctx.Done():
			return
		case <-exited:
			down := time.Now()
			i.log.Info("PostgreSQL exited while the server ran; starting it again on the same socket (its last lines follow)",
				"status", fmt.Sprint(m.err), "lastLines", m.tail.String())
			if !i.restartManaged(ctx) {
				return
			}
			switch i.retakeLock(ctx, i.current().exited) {
			case lockEnded:
				return
			case lockServerExited:
				continue // died again: the exit's own branch brings it back
			}
			i.log.Info("PostgreSQL is back", "after", time.Since(down).Round(time.Millisecond).String())
		case <-tick.C:
			if i.lockHeld(ctx) {
				continue
			}
			select {
			case <-exited:
				continue // the exit's own branch brings it back
			default:
			}
			// The lock's session also ends when the managed server dies,
			// often before its exit is seen (the exit waits a moment for
			// its processes' output). Retaking must then give way to the
			// restart, or nothing would start the server again.
			down := time.Now()
			i.log.Info("the control-plane lock's database session was lost; taking the lock again", "database", i.target)
			switch i.retakeLock(ctx, exited) {
			case lockEnded:
				return
			case lockServerExited:
				continue // the exit's own branch brings it back
			}
			i.log.Info("the control-plane lock is held again", "after", time.Since(down).Round(time.Millisecond).String())
		}
	}
}

// lockHeld asks the lock's session whether it still answers.
func (i *Instance) lockHeld(ctx context.Context) bool {
	if i.lock == nil || i.lock.conn == nil || i.lock.conn.IsClosed() {
		return false
	}
	// Not under ctx: pgx closes a connection whose query is cancelled, and
	// a stop that cancelled a ping would close the lock's session before
	// Stop releases it. The stop waits for the ping instead (at most
	// lockCheckInterval).
	check, cancel := context.WithTimeout(context.Background(), lockCheckInterval)
	defer cancel()
	// A watcher being stopped judges nothing.
	return i.lock.conn.Ping(check) == nil || ctx.Err() != nil
}

// restartManaged starts the managed server again until it runs or ctx ends,
// waiting longer between tries (a postmaster killed with SIGKILL leaves
// backends that hold its shared memory for a moment; a full disk may take
// a person to free). It reports whether the server runs.
func (i *Instance) restartManaged(ctx context.Context) bool {
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		m, err := startManaged(ctx, i.home, i.log)
		if err == nil {
			i.mu.Lock()
			i.managed = m
			i.restarts++
			i.mu.Unlock()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		i.log.Info("PostgreSQL did not start again; trying once more", "attempt", attempt, "in", wait.String(), "error", err.Error())
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, restartBackoffMax)
	}
}

// How a retake of the control-plane lock ended.
type lockRetake int

const (
	lockTaken        lockRetake = iota // held again
	lockServerExited                   // the managed server exited meanwhile
	lockEnded                          // the watch ends: stopped, or the lock is another's
)

// retakeLock takes the control-plane lock on a new session until it holds
// it, ctx ends, or exited (the managed server's exit; nil for an external
// database) closes: a dead server cannot give the lock, and the watcher
// has to start it again first. Another control plane holding it is
// final: Failed says so and the watcher ends.
func (i *Instance) retakeLock(ctx context.Context, exited <-chan struct{}) lockRetake {
	holder := i.lock.holder
	if i.lock.conn != nil {
		conn := i.lock.conn
		i.lock.conn = nil
		closeCtx, cancel := context.WithTimeout(ctx, time.Second)
		_ = conn.Close(closeCtx)
		cancel()
	}
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		l, err := HoldInstanceLock(ctx, i.dsn, holder)
		if err == nil {
			err = l.recordHolder(ctx)
			if err == nil {
				i.lock = l
				i.mu.Lock()
				i.lockRetaken++
				i.mu.Unlock()
				return lockTaken
			}
			_ = l.Release(context.WithoutCancel(ctx))
		}
		if errors.Is(err, ErrLocked) {
			i.failed <- fmt.Errorf("%w: %v", ErrLockTaken, err)
			return lockEnded
		}
		if ctx.Err() != nil {
			return lockEnded
		}
		i.log.Info("the control-plane lock could not be taken again yet; trying once more", "attempt", attempt, "in", wait.String(), "error", err.Error())
		select {
		case <-ctx.Done():
			return lockEnded
		case <-exited:
			return lockServerExited
		case <-time.After(wait):
		}
		wait = min(2*wait, restartBackoffMax)
	}
}
