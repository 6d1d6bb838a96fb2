package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// BenchmarkEventsByTypeOfAMillion reads the newest 1000 tool.called events
// of a Dot whose log holds 1,000,000 events (one in ten a tool.called), as
// GET .../events?types=tool.called&limit=1000&order=desc does, and the
// oldest 1000 (order=asc). Target: under 50 ms. The plan is logged, to show
// the index used. The log is written once with COPY, untimed.
func BenchmarkEventsByTypeOfAMillion(b *testing.B) {
	ctx := context.Background()
	dot := newDot("million")
	const total = 1_000_000
	types := []string{"tool.called", "agent.state", "agent.state", "task.progress", "message.assistant", "agent.state", "task.progress", "agent.state", "memory.updated", "agent.state"}
	started := time.Now()
	i := 0
	_, err := testStore.pool.CopyFrom(ctx, pgx.Identifier{"events"},
		[]string{"dot_namespace", "dot_name", "dot_uid", "type", "data", "source", "guest_seq"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == total {
				return nil, nil
			}
			i++
			typ := types[i%len(types)]
			return []any{dot.Namespace, dot.Name, dot.UID, typ, `{"tool":"exec","ok":true}`, "guest", int64(i)}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := testStore.pool.Exec(ctx, "ANALYZE events"); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %d events in %s", total, time.Since(started).Round(time.Millisecond))
	defer func() {
		if err := testStore.DeleteDot(ctx, dot.UID); err != nil {
			b.Error(err)
		}
	}()
	for _, desc := range []bool{true, false} {
		name := map[bool]string{true: "newest", false: "oldest"}[desc]
		b.Run(name, func(b *testing.B) {
			q := EventQuery{DotUID: dot.UID, Types: []string{"tool.called"}, Desc: desc, Limit: 1000}
			for b.Loop() {
				events, err := testStore.Events(ctx, q)
				if err != nil || len(events) != 1000 {
					b.Fatalf("got %d events, %v", len(events), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/read")
		})
	}
	var plan []string
	sql, args := eventsPage(EventQuery{DotUID: dot.UID, Types: []string{"tool.called"}, Desc: true, Limit: 1000})
	r, err := testStore.pool.Query(ctx, "EXPLAIN "+sql, args...)
	if err == nil {
		plan, err = pgx.CollectRows(r, pgx.RowTo[string])
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("plan of the newest page:\n%s", strings.Join(plan, "\n"))
}
