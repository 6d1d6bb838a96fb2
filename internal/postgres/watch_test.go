package postgres

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// waitFor polls cond until it holds or the bound passes (a bound on a wait,
// not a timing assertion).
func waitFor(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, bound)
		}
	}
}

// The managed PostgreSQL killed with SIGKILL under a running server comes
// back on the same socket: the pool answers again with what was committed,
// the control-plane lock is held again (a second control plane is still
// refused), and the log says so.
func TestManagedPostgresKilledComesBack(t *testing.T) {
	ctx := context.Background()
	log := &lines{}
	inst, err := Start(ctx, Options{Home: t.TempDir(), Logger: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := inst.Stop(ctx); err != nil {
			t.Errorf("stop after a restart: %v", err)
		}
	}()
	if _, err := inst.Pool().Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the kill')"); err != nil {
		t.Fatal(err)
	}
	first := inst.ManagedPID()
	killed := time.Now()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A backend may answer a moment after its postmaster died: what counts
	// is a query answered by the server started again.
	waitFor(t, "a new postmaster", 2*time.Minute, func() bool { r, _ := inst.Recoveries(); return r == 1 })
	var v string
	waitFor(t, "the pool answering after the kill", 2*time.Minute, func() bool {
		q, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return inst.Pool().QueryRow(q, "SELECT v FROM kept").Scan(&v) == nil
	})
	t.Logf("FIGURE managed PostgreSQL killed to a query answered again: %v", time.Since(killed).Round(time.Millisecond))
	if v != "before the kill" {
		t.Errorf("row committed before the kill reads %q", v)
	}
	if pid := inst.ManagedPID(); pid == first || pid == 0 {
		t.Errorf("postmaster after the kill is pid %d (was %d); want a new one", pid, first)
	}
	waitFor(t, "the lock held again", time.Minute, func() bool { _, l := inst.Recoveries(); return l >= 1 })
	if restarts, _ := inst.Recoveries(); restarts != 1 {
		t.Errorf("restarts = %d, want 1", restarts)
	}
	if _, err := inst.Pool().Exec(ctx, "INSERT INTO kept VALUES ('after the kill')"); err != nil {
		t.Errorf("a write after the restart: %v", err)
	}
	if _, err := HoldInstanceLock(ctx, inst.DSN(), Holder{PID: 2, Host: "other"}); !errors.Is(err, ErrLocked) {
		t.Errorf("a second control plane after the restart: %v; want ErrLocked", err)
	}
	for _, want := range []string{"PostgreSQL exited while the server ran", "PostgreSQL is back"} {
		if !log.contains(want) {
			t.Errorf("no log line %q:\n%s", want, strings.Join(log.all, "\n"))
		}
	}
	select {
	case err := <-inst.Failed():
		t.Errorf("Failed after a restart: %v", err)
	default:
	}
}

// A postmaster killed while one of its backends waits on a program (COPY
// TO PROGRAM, which keeps the postmaster's output open and the shared
// memory attached) comes back at once: its exit is what is waited for, not
// the end of its output, and the processes it left are stopped so the new
// one can start. The program sleeps far longer than the wait allows.
func TestManagedPostgresKilledLeavingABackend(t *testing.T) {
	ctx := context.Background()
	log := &lines{}
	h, err := home.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inst, err := Start(ctx, Options{Home: h.Root, Logger: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := inst.Stop(ctx); err != nil {
			t.Errorf("stop after a restart: %v", err)
		}
	}()
	// The program holds its backend's client socket too, so the COPY's
	// answer waits for the program: it is ended when the test ends.
	t.Cleanup(func() { killProcessesIn(t, h.DB()) })
	conn, err := pgx.Connect(ctx, inst.DSN())
	if err != nil {
		t.Fatal(err)
	}
	copying := make(chan error, 1)
	go func() {
		q, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		_, err := conn.Exec(q, "COPY (SELECT 1) TO PROGRAM 'sleep 600'")
		copying <- err
	}()
	waitFor(t, "the backend running its program", time.Minute, func() bool {
		var n int
		err := inst.Pool().QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY%' AND state = 'active'").Scan(&n)
		return err == nil && n == 1
	})
	first := inst.ManagedPID()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r, _ := inst.Recoveries(); r == 1 {
			break
		}
		if time.Now().After(deadline) {
			log.mu.Lock()
			t.Fatalf("no new postmaster within 30 s of the kill; the log:\n%s", strings.Join(log.all, "\n"))
		}
	}
	waitFor(t, "the pool answering after the kill", 30*time.Second, func() bool {
		q, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return inst.Pool().Ping(q) == nil
	})
	if !log.contains("killed the processes the exited PostgreSQL left running") {
		t.Error("the log does not say the backend left running was killed")
	}
}

// killProcessesIn kills what still runs with dir as its working directory.
func killProcessesIn(t *testing.T, dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				t.Logf("ending pid %d, left running in %s", pid, dir)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// terminateLockSession ends the control-plane lock's session on the
// database at dsn, as an external server's restart or a cut network would.
func terminateLockSession(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	err = c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE $1`, applicationName+"%").Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("terminate the lock's session: %d ended, %v; want 1", n, err)
	}
}

// An external database's lock session that is cut is taken again; when
// another control plane took the lock meanwhile, Failed says so.
func TestLockSessionLost(t *testing.T) {
	ctx := context.Background()
	// cut starts a control plane on a database of its own and ends its
	// lock's session.
	cut := func(t *testing.T) (*Instance, string) {
		dsn := newDatabase(t)
		inst, err := Start(ctx, Options{Home: t.TempDir(), DatabaseURL: dsn})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = inst.Stop(ctx) })
		terminateLockSession(t, dsn)
		return inst, dsn
	}
	t.Run("taken again", func(t *testing.T) {
		inst, dsn := cut(t)
		waitFor(t, "the lock taken again", time.Minute, func() bool { _, l := inst.Recoveries(); return l == 1 })
		if _, err := HoldInstanceLock(ctx, dsn, Holder{PID: 2, Host: "other"}); !errors.Is(err, ErrLocked) {
			t.Errorf("a second control plane after the retake: %v; want ErrLocked", err)
		}
	})
	t.Run("taken by another", func(t *testing.T) {
		inst, dsn := cut(t)
		var err error
		// Another control plane takes the lock before the watcher's next
		// look (every lockCheckInterval).
		var other *InstanceLock
		waitFor(t, "another control plane taking the free lock", 10*time.Second, func() bool {
			other, err = HoldInstanceLock(ctx, dsn, Holder{PID: 2, Host: "other"})
			return err == nil
		})
		defer other.Release(ctx)
		select {
		case err := <-inst.Failed():
			if !errors.Is(err, ErrLockTaken) || !strings.Contains(err.Error(), "host=other") {
				t.Errorf("Failed: %v; want ErrLockTaken naming the other holder", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Failed said nothing when another control plane took the lock")
		}
	})
}

// A lock retake that starts while the managed server is dying (its session
// ended before its exit was seen) gives way once the exit is seen: only the
// restart can bring the lock back, and a retake that went on trying would
// keep the watcher from ever starting the server again.
func TestLockRetakeGivesWayToTheRestart(t *testing.T) {
	// A socket directory with nothing listening: every try is refused, as
	// while the server is down.
	dsn := "postgres://postgres@/invisible_dots?host=" + t.TempDir() + "&connect_timeout=2"
	i := &Instance{dsn: dsn, lock: &InstanceLock{holder: Holder{PID: 1, Host: "here"}}, log: (&lines{}).logger(), failed: make(chan error, 1)}
	exited := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(exited) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := i.retakeLock(ctx, exited); got != lockServerExited {
		t.Fatalf("retakeLock returned %d; want lockServerExited (%d)", got, lockServerExited)
	}
	if ctx.Err() != nil {
		t.Fatal("retakeLock kept trying until its context ended instead of giving way to the restart")
	}
}
