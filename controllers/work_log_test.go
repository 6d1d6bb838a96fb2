package controllers

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// TestWorkLogFoldsOnce: the controllers of a Dot's work share one view of
// its log. The log is read whole once; a controller's turn reads it again
// only after the follower told of new events, and then only what follows
// the last event folded; news told while a read is under way is not lost.
func TestWorkLogFoldsOnce(t *testing.T) {
	dot := store.Dot{Namespace: "default", Name: "d", UID: "uid-1"}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var stored []store.Event
	add := func(n int) {
		for range n {
			data, _ := json.Marshal(map[string]any{"generation": len(stored) + 1})
			stored = append(stored, store.Event{ID: int64(len(stored) + 1), Dot: dot, Type: wire.EventDotUpdated, Source: store.SourceHost, Data: data, CreatedAt: t0})
		}
	}
	var reads []int64 // the id each read began after
	var duringRead func()
	l := &WorkLog{}
	l.eventsAfter = func(_ context.Context, uid string, after int64, limit int) ([]store.Event, error) {
		if uid != dot.UID {
			t.Fatalf("read the log of %s, want %s", uid, dot.UID)
		}
		reads = append(reads, after)
		if duringRead != nil {
			duringRead()
			duringRead = nil
		}
		var out []store.Event
		for _, e := range stored {
			if e.ID > after && len(out) < limit {
				out = append(out, e)
			}
		}
		return out, nil
	}
	turn := func(step string) int64 {
		t.Helper()
		w, err := l.Open(context.Background(), dot)
		if err != nil {
			t.Fatalf("%s: open: %v", step, err)
		}
		defer w.Close()
		return w.View().LastID
	}

	add(1500)
	steps := []struct {
		reason    string
		before    func()
		wantReads []int64
		wantLast  int64
	}{
		{reason: "the first turn reads the whole log, a page at a time", wantReads: []int64{0, 1000}, wantLast: 1500},
		{reason: "another controller's turn with no news reads nothing", wantLast: 1500},
		{reason: "events stored but not told of yet are not read", before: func() { add(2) }, wantLast: 1500},
		{reason: "after the follower's news, only what follows the last folded is read",
			before: func() { l.tell(types.UID(dot.UID)) }, wantReads: []int64{1500}, wantLast: 1502},
		{reason: "news told during a read is kept for the next turn",
			before: func() {
				add(1)
				l.tell(types.UID(dot.UID))
				duringRead = func() { add(1); l.tell(types.UID(dot.UID)) }
			}, wantReads: []int64{1502}, wantLast: 1504},
		{reason: "the news told during the read is read at the next turn", wantReads: []int64{1504}, wantLast: 1504},
		{reason: "and then nothing more", wantLast: 1504},
	}
	for i, s := range steps {
		reads = nil
		if s.before != nil {
			s.before()
		}
		last := turn(s.reason)
		if diff := cmp.Diff(s.wantReads, reads); diff != "" || last != s.wantLast {
			t.Errorf("step %d: %s\nreads began after -want +got:\n%s\nlast folded %d, want %d", i, s.reason, diff, last, s.wantLast)
		}
	}

	l.Forget(types.UID(dot.UID))
	reads = nil
	if last := turn("after Forget"); last != 1504 || len(reads) != 2 {
		t.Errorf("a forgotten Dot's view is folded anew: last %d after %d reads, want 1504 after 2", last, len(reads))
	}
}
