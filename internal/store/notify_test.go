package store

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
)

// mine keeps the payloads of the given Dots (other tests share the
// database and its notifications).
func mine(payloads []string, dots ...Dot) []string {
	var out []string
	for _, p := range payloads {
		for _, d := range dots {
			if p == OutboxPayload(d) {
				out = append(out, p)
			}
		}
	}
	return out
}

func TestOutboxChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testStore.NewChanges(OutboxChannel, 100, logr.Discard())
	// A new epoch begins once LISTEN took: what came before is not kept.
	_, before, _, _ := c.Since(Cursor{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	var cur Cursor
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, cur, _, _ = c.Since(Cursor{}); cur.Epoch != before.Epoch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Changes did not listen within 10 s")
		}
	}

	dot, other := newDot("notified"), newDot("other")
	wait := func(what string) []string {
		t.Helper()
		for deadline := time.After(10 * time.Second); ; {
			payloads, next, complete, changed := c.Since(cur)
			if !complete {
				t.Fatalf("%s: Since(%v) is not complete", what, cur)
			}
			if got := mine(payloads, dot, other); len(got) > 0 {
				cur = next
				return got
			}
			cur = next
			select {
			case <-changed:
			case <-deadline:
				return nil
			}
		}
	}

	// Enqueued in a transaction: heard of once it commits, not before.
	tx, err := testStore.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := EnqueueTx(ctx, tx, Inbound{ID: "notify-" + dot.UID, Dot: dot, Type: "user.message"}); err != nil || !ok {
		t.Fatalf("EnqueueTx = %v, %v", ok, err)
	}
	time.Sleep(200 * time.Millisecond)
	if payloads, _, _, _ := c.Since(cur); len(mine(payloads, dot)) != 0 {
		t.Errorf("a row was told of before its transaction committed: %v", payloads)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{OutboxPayload(dot)}, wait("after the commit")); diff != "" {
		t.Errorf("after the commit (-want +got):\n%s", diff)
	}

	// A row enqueued again (same id) is not stored, so not told of; a row
	// rolled back is not either.
	if ok, err := testStore.Enqueue(ctx, Inbound{ID: "notify-" + dot.UID, Dot: dot, Type: "user.message"}); err != nil || ok {
		t.Fatalf("Enqueue again = %v, %v; want not stored", ok, err)
	}
	err = testStore.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := EnqueueTx(ctx, tx, Inbound{ID: "rolled-back-" + dot.UID, Dot: dot, Type: "user.message"}); err != nil {
			return err
		}
		return context.Canceled
	})
	if err != context.Canceled {
		t.Fatalf("InTx = %v; want the rollback's error", err)
	}
	if ok, err := testStore.Enqueue(ctx, Inbound{ID: "notify-" + other.UID, Dot: other, Type: "user.message"}); err != nil || !ok {
		t.Fatalf("Enqueue(other) = %v, %v", ok, err)
	}
	if diff := cmp.Diff([]string{OutboxPayload(other)}, wait("after a repeat, a rollback and another Dot's row")); diff != "" {
		t.Errorf("after a repeat, a rollback and another Dot's row (-want +got):\n%s", diff)
	}

	// A cursor of another epoch, or from beyond the end, reads everything.
	for _, stale := range []Cursor{{Epoch: "elsewhere", N: 1}, {Epoch: cur.Epoch, N: cur.N + 5}} {
		if _, _, complete, _ := c.Since(stale); complete {
			t.Errorf("Since(%v) is complete; want the reader told to read everything", stale)
		}
	}
	if got, _ := ParseCursor(cur.String()); got != cur {
		t.Errorf("ParseCursor(%q) = %v; want %v", cur.String(), got, cur)
	}
	for _, bad := range []string{"x", ":1", "e:-1", "e:one"} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) took it", bad)
		}
	}
	if d, ok := ParseOutboxPayload(OutboxPayload(dot)); !ok || d != dot {
		t.Errorf("ParseOutboxPayload(OutboxPayload(%v)) = %v, %v", dot, d, ok)
	}
}

// A reader waiting for a change is woken when the listening ends (the
// server stops), not left to its own timeout.
func TestChangesEndWakesWaiters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := testStore.NewChanges(OutboxChannel, 10, logr.Discard())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	for deadline := time.Now().Add(10 * time.Second); !c.Listening(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Changes did not listen within 10 s")
		}
	}
	_, _, _, changed := c.Since(Cursor{})
	cancel()
	<-done
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting reader was not woken when the listening ended")
	}
	if c.Listening() {
		t.Error("Listening() is true after Run ended")
	}
}

// TestWakeupsShareOneListener: every reader of a Store's Wakeups is woken
// by a notification, through one listening connection whatever their
// number, which closes when the last reader stops and opens again for the
// next.
func TestWakeupsShareOneListener(t *testing.T) {
	ctx := context.Background()
	const channel = "wakeups_test"
	s := New(testStore.pool)
	w := s.Wakeups(channel, logr.Discard())
	if again := s.Wakeups(channel, logr.Discard()); again != w {
		t.Fatal("a second Wakeups of the same channel is another follower")
	}
	listeners := func() int {
		t.Helper()
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN `+channel+`'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitListeners := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); listeners() != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections listen on %s, want %d", listeners(), channel, want)
			}
		}
		if want > 0 {
			for deadline := time.Now().Add(10 * time.Second); !w.Listening(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("Wakeups did not say it listens")
				}
			}
		}
	}
	wakes := func(what string) {
		t.Helper()
		_, _, _, changed := w.Since(Cursor{})
		if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, 'x')", channel); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: a notification did not wake the readers within 10 s", what)
		}
	}
	run := func() (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = w.Run(rctx)
		}()
		return func() { cancel(); <-done }
	}

	stopA, stopB := run(), run()
	waitListeners(1)
	wakes("two readers")
	stopA()
	if n := listeners(); n != 1 {
		t.Fatalf("after one of two readers stopped, %d connections listen, want 1", n)
	}
	wakes("the reader left")
	stopB()
	waitListeners(0)
	stopC := run()
	defer stopC()
	waitListeners(1)
	wakes("a reader after the last one stopped")
}
