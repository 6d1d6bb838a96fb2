package dotsapi

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// BenchmarkStreamFanOut is the live stream's latency under load: 100
// clients (the Go client, each on its own connection, as a dots-viewer on
// the stream of every Dot, so each event passes the namespace check) follow
// the log while writers store an event a millisecond, each in its own
// transaction, for 3 s. The latency of a delivery is from the writer's
// commit returning to the client having the event decoded; the figures are
// its p50, p99 and max over every (event, client), the p99 over events of
// the time until every client had it, and the rate written. The clients,
// the server and PostgreSQL share the machine. Target: p99 within 50 ms.
func BenchmarkStreamFanOut(b *testing.B) {
	const (
		clients = 100
		rate    = 1000 // events a second
		events  = 3 * rate
	)
	e := newEnv(b)
	dot := e.dots["team-a/helper"]
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		type delivery struct {
			id int64
			at time.Time
		}
		got := make([][]delivery, clients)
		var wg sync.WaitGroup
		var mu sync.Mutex
		complete := 0
		allDone := make(chan struct{})
		for i := range clients {
			c, err := client.New(e.restConfig("viewer"))
			if err != nil {
				b.Fatal(err)
			}
			stream, _ := c.Stream(ctx, client.StreamOptions{Retry: 10 * time.Millisecond})
			got[i] = make([]delivery, 0, events)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ev := range stream {
					if ev.DotUID != dot.UID {
						continue
					}
					got[i] = append(got[i], delivery{ev.ID, time.Now()})
					if len(got[i]) == events {
						mu.Lock()
						if complete++; complete == clients {
							close(allDone)
						}
						mu.Unlock()
					}
				}
			}()
		}
		for deadline := time.Now().Add(30 * time.Second); e.feed.subscribers() < clients; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d clients subscribed in 30 s", e.feed.subscribers(), clients)
			}
		}

		// Writers in parallel, as the event pumps and controllers are: one
		// alone does not commit 1,000 transactions a second here. Each
		// event is due at its millisecond.
		committed := make(map[int64]time.Time, events)
		due := make(chan struct{}, events)
		var writers sync.WaitGroup
		for range 8 {
			writers.Add(1)
			go func() {
				defer writers.Done()
				for range due {
					stored, err := testStore.AppendEvents(ctx, store.Event{Dot: dot, Type: wire.EventMessageUser, Source: store.SourceHost,
						Data: []byte(`{"text":"the 9:40 train is booked"}`)})
					at := time.Now()
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					committed[stored[0].ID] = at
					mu.Unlock()
				}
			}()
		}
		start := time.Now()
		for i := range events {
			if wait := time.Until(start.Add(time.Duration(i) * time.Second / rate)); wait > 0 {
				time.Sleep(wait)
			}
			due <- struct{}{}
		}
		close(due)
		writers.Wait()
		if b.Failed() {
			b.FailNow()
		}
		written := time.Since(start)
		select {
		case <-allDone:
		case <-time.After(60 * time.Second):
			b.Fatalf("%d of %d clients got every event within 60 s", complete, clients)
		}
		cancel()
		wg.Wait()

		var each []time.Duration
		last := map[int64]time.Duration{}
		for _, ds := range got {
			for _, d := range ds {
				l := max(d.at.Sub(committed[d.id]), 0)
				each = append(each, l)
				last[d.id] = max(last[d.id], l)
			}
		}
		var all []time.Duration
		for _, l := range last {
			all = append(all, l)
		}
		slices.Sort(each)
		slices.Sort(all)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(quantile(each, 0.50)), "p50-ms")
		b.ReportMetric(ms(quantile(each, 0.99)), "p99-ms")
		b.ReportMetric(ms(each[len(each)-1]), "max-ms")
		b.ReportMetric(ms(quantile(all, 0.99)), "p99-every-client-ms")
		b.ReportMetric(float64(events)/written.Seconds(), "written/s")
	}
}

// quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}
