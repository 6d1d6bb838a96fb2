package store

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"k8s.io/utils/ptr"
)

func TestEventsNotifyAtCommit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testStore.NewChanges(EventsChannel, 1000, logr.Discard())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); !c.Listening(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Changes did not listen within 10 s")
		}
	}
	_, cur, _, _ := c.Since(Cursor{})
	// heard waits for the payload id (other tests write events too).
	heard := func(id string, within time.Duration) bool {
		deadline := time.After(within)
		for {
			payloads, next, _, changed := c.Since(cur)
			cur = next
			if slices.Contains(payloads, id) {
				return true
			}
			select {
			case <-changed:
			case <-deadline:
				return false
			}
		}
	}

	dot := newDot("tailed")
	var stored []Event
	tx, err := testStore.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored, err = AppendEventsTx(ctx, tx,
		Event{Dot: dot, Type: "agent.state", Source: SourceGuest, GuestSeq: ptr.To(int64(1))},
		Event{Dot: dot, Type: "task.progress", Source: SourceGuest, GuestSeq: ptr.To(int64(2))})
	if err != nil {
		t.Fatal(err)
	}
	last := strconv.FormatInt(stored[1].ID, 10)
	if heard(last, 200*time.Millisecond) {
		t.Error("events were told of before their transaction committed")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !heard(last, 10*time.Second) {
		t.Fatalf("the commit of events up to %s was not told of", last)
	}

	// A batch that stores nothing new (seen before) tells nothing.
	again, err := testStore.AppendEvents(ctx, Event{Dot: dot, Type: "agent.state", Source: SourceGuest, GuestSeq: ptr.To(int64(1))})
	if err != nil || len(again) != 0 {
		t.Fatalf("AppendEvents again = %v, %v; want nothing stored", again, err)
	}
	err = testStore.InTx(ctx, func(tx pgx.Tx) error {
		_, err := AppendEventsTx(ctx, tx, Event{Dot: dot, Type: "agent.state", Source: SourceGuest, GuestSeq: ptr.To(int64(3))})
		if err != nil {
			return err
		}
		return context.Canceled
	})
	if err != context.Canceled {
		t.Fatalf("InTx = %v; want the rollback's error", err)
	}

	// The table tells the rest, whatever the notifications said.
	other := newDot("other")
	if _, err := testStore.AppendEvents(ctx, Event{Dot: other, Type: "message.user", Source: SourceHost}); err != nil {
		t.Fatal(err)
	}
	events, err := testStore.EventsSince(ctx, TailQuery{After: stored[0].ID - 1, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for i, e := range events {
		if i > 0 && e.ID <= events[i-1].ID {
			t.Fatalf("EventsSince is not in id order: %d after %d", e.ID, events[i-1].ID)
		}
		if e.Dot == dot || e.Dot == other {
			mine = append(mine, e.Dot.Name+" "+e.Type)
		}
	}
	if want := []string{"tailed agent.state", "tailed task.progress", "other message.user"}; !slices.Equal(mine, want) {
		t.Errorf("EventsSince = %v; want %v", mine, want)
	}
	events, err = testStore.EventsSince(ctx, TailQuery{After: stored[0].ID, DotUID: dot.UID, Types: []string{"task.progress", "message.user"}, Limit: 10})
	if err != nil || len(events) != 1 || events[0].ID != stored[1].ID {
		t.Errorf("EventsSince(one Dot, types) = %v, %v; want event %d alone", events, err, stored[1].ID)
	}
	lastID, err := testStore.LastEventID(ctx)
	if err != nil || lastID < events[0].ID {
		t.Errorf("LastEventID = %d, %v; want at least %d", lastID, err, events[0].ID)
	}
}
