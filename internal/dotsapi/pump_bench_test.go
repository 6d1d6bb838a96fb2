package dotsapi

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	fake "github.com/invisible-dots/invisible-dots/hostagent/guestclient/fakeguest"
	"github.com/invisible-dots/invisible-dots/hostagent/pump"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
)

// BenchmarkPumpIngest is the events one event pump gets stored per second:
// a fake guest stream (the engine's wire format, served from memory, named
// fake) of tool.called events, the real pump with its default batches, the
// Dots API's ingestion route over HTTP with a host agent's credential, and
// the event log in PostgreSQL. Each iteration is 10,000 events; the figure
// is events/s.
func BenchmarkPumpIngest(b *testing.B) {
	const perLoop = 10000
	e := newEnv(b)
	dot := e.dots["team-a/helper"]
	agent, err := client.New(e.restConfig("agent-1"))
	if err != nil {
		b.Fatal(err)
	}
	stream := fake.NewStream()
	p := &pump.Pump{
		Host: "host-1", Key: types.NamespacedName{Namespace: "team-a", Name: "helper"}, DotUID: dot.UID,
		Target: guestclient.Target{Port: 1, PID: 1, Token: "bench"},
		Guest: fake.GuestFns{StreamFn: func(ctx context.Context, _ guestclient.Target, after int64) (io.ReadCloser, error) {
			return stream.Open(ctx, after), nil
		}},
		Ingest: agent, Log: logr.Discard(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	data, _ := json.Marshal(protocol.ToolCalled{TaskID: ptr.To("0f8e6c1a-task"), Tool: "exec", Permission: "computer.exec",
		Decision: protocol.Allow, OK: true, DurationMS: 1234, Target: ptr.To("make test")})
	events := make([]protocol.OutboundEvent, perLoop)
	var last int64
	var elapsed time.Duration
	for b.Loop() {
		for i := range events {
			events[i] = protocol.OutboundEvent{Type: protocol.EventToolCalled, Data: data}
		}
		start := time.Now()
		written := stream.Append(events...)
		last = written[len(written)-1].Seq
		for {
			seq, err := testStore.LastGuestSeq(ctx, dot.UID)
			if err != nil {
				b.Fatal(err)
			}
			if seq >= last {
				break
			}
			time.Sleep(time.Millisecond)
		}
		elapsed += time.Since(start)
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("the pump: %v", err)
	}
	b.ReportMetric(float64(last)/elapsed.Seconds(), "events/s")
}
