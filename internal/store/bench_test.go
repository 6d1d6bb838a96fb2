package store

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

// BenchmarkAppendEvent stores one guest event per transaction, the event
// pump's usual write.
func BenchmarkAppendEvent(b *testing.B) {
	ctx := context.Background()
	dot := newDot("bench")
	var n int64
	for b.Loop() {
		n++
		if _, err := testStore.AppendEvents(ctx, Event{Dot: dot, Type: "task.progress", Source: SourceGuest, GuestSeq: ptr.To(n)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEventsAfter reads a page of 100 events from the middle of a Dot's
// log of 10000.
func BenchmarkEventsAfter(b *testing.B) {
	ctx := context.Background()
	dot := newDot("bench")
	batch := make([]Event, 0, 1000)
	var first int64
	for i := int64(1); i <= 10000; i++ {
		batch = append(batch, Event{Dot: dot, Type: "task.progress", Source: SourceGuest, GuestSeq: ptr.To(i)})
		if len(batch) == cap(batch) {
			stored, err := testStore.AppendEvents(ctx, batch...)
			if err != nil {
				b.Fatal(err)
			}
			if first == 0 {
				first = stored[0].ID
			}
			batch = batch[:0]
		}
	}
	for b.Loop() {
		events, err := testStore.EventsAfter(ctx, dot.UID, first+5000, 100)
		if err != nil || len(events) != 100 {
			b.Fatalf("got %d events, %v", len(events), err)
		}
	}
}

// BenchmarkEnqueueDelivered enqueues one outbox row and marks it delivered.
func BenchmarkEnqueueDelivered(b *testing.B) {
	ctx := context.Background()
	dot := newDot("bench")
	i := 0
	for b.Loop() {
		i++
		id := TaskCreatedID(dot.UID, i)
		if _, err := testStore.Enqueue(ctx, Inbound{ID: id, Dot: dot, Type: "task.created"}); err != nil {
			b.Fatal(err)
		}
		if err := testStore.MarkDelivered(ctx, id, timeNow()); err != nil {
			b.Fatal(err)
		}
	}
}

func timeNow() time.Time { return time.Now() }
