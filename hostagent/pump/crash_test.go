package pump

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient/fakeguest"
)

// TestPumpKilledBetweenStoreAndCursor: a pump killed right after the
// control plane stored a batch, before it took the answer, leaves the batch
// stored once; the next pump (a restarted agent) asks the log's cursor and
// goes on after it: every event stored, none twice, under the guest's own
// seqs and ids.
func TestPumpKilledBetweenStoreAndCursor(t *testing.T) {
	stream, l := fakeguest.NewStream(), newFakeLog()
	for i := 1; i <= 6; i++ {
		ev := state("IDLE")
		ev.ID = fmt.Sprintf("ev-%d", i)
		stream.Append(ev)
	}
	newPump := func() *Pump {
		return &Pump{Host: "h1", Key: testKey, DotUID: testUID, Target: testTarget,
			Guest: fakeguest.GuestFns{StreamFn: func(ctx context.Context, _ guestclient.Target, after int64) (io.ReadCloser, error) {
				return stream.Open(ctx, after), nil
			}},
			Ingest: l, BatchSize: 3, FlushDelay: time.Hour, Retry: time.Millisecond, Log: logr.Discard(),
		}
	}

	// The first pump dies at its first stored batch.
	var hits atomic.Int32
	remove := crashpoint.OnHit(crashpoint.PumpStored, func() {
		if hits.Add(1) == 1 {
			runtime.Goexit()
		}
	})
	defer remove()
	died := make(chan struct{})
	go func() {
		defer close(died)
		_ = newPump().Run(context.Background())
		t.Error("the first pump's Run returned; it should have died at " + crashpoint.PumpStored)
	}()
	select {
	case <-died:
	case <-time.After(5 * time.Second):
		t.Fatal("the first pump did not reach " + crashpoint.PumpStored)
	}
	if got := l.summary().Order; !cmp.Equal(got, seqs(1, 3)) {
		t.Fatalf("stored before the kill: %v; want the first batch, 1..3", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- newPump().Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for !l.has(seqs(1, 6)...) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // whatever else would come, comes now
	cancel()
	if err := <-done; err != nil {
		t.Errorf("the second pump's Run = %v", err)
	}
	sum := l.summary()
	if diff := cmp.Diff(logged{Order: seqs(1, 6), Types: []string{"agent.state", "agent.state", "agent.state", "agent.state", "agent.state", "agent.state"}}, sum); diff != "" {
		t.Errorf("the log after the restart -want +got:\n%s", diff)
	}
	for i := int64(1); i <= 6; i++ {
		if id := l.stored[i].ID; id != fmt.Sprintf("ev-%d", i) {
			t.Errorf("seq %d stored with id %q; want the guest's ev-%d", i, id, i)
		}
	}
	if opened := stream.Opened(); len(opened) < 2 || opened[len(opened)-1] != 3 {
		t.Errorf("the stream was opened after %v; want the restarted pump to open it after the stored cursor 3", opened)
	}
}
