package store

import (
	"context"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/postgres/migrate"
)

// TestEventIDsVisibleInOrder: a second writer waits for the first one's
// commit before drawing its id, so no reader that resumed after the second id
// can miss the first (ref 9.1).
func TestEventIDsVisibleInOrder(t *testing.T) {
	ctx := context.Background()
	dot := newDot("order")
	tx, err := testStore.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	first, err := AppendEventsTx(ctx, tx, Event{Dot: dot, Type: "first", Source: SourceHost})
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		events []Event
		err    error
	}
	second := make(chan result, 1)
	go func() {
		events, err := testStore.AppendEvents(ctx, Event{Dot: dot, Type: "second", Source: SourceHost})
		second <- result{events, err}
	}()

	// Wait until the second writer is queued on the events lock (a bound on a
	// wait, not a timing assertion).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		err := testStore.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2)`,
			uint32(migrate.LockClass), uint32(migrate.LockEvents)).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second writer never waited for the events lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case r := <-second:
		t.Fatalf("the second writer finished while the first was uncommitted: %+v", r)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.events) != 1 || r.events[0].ID <= first[0].ID {
		t.Errorf("second event id %v, want above the first's %d", r.events, first[0].ID)
	}
}
