package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// queued is how many writes wait in the commit queue.
func (s *Store) queued() int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return len(s.queue)
}

// holdQueue starts a write that commits only once n other writes wait
// behind it, so that those n form the next group commit whatever the
// scheduler does; start launches them. It returns when the group has
// committed or failed.
func holdQueue(t *testing.T, s *Store, n int, start func()) {
	t.Helper()
	held := make(chan error, 1)
	leading := make(chan struct{})
	go func() {
		held <- s.Write(context.Background(), "hold", func(tx *Tx) error {
			close(leading)
			deadline := time.Now().Add(10 * time.Second)
			for s.queued() < n {
				if time.Now().After(deadline) {
					return fmt.Errorf("only %d of %d writes queued", s.queued(), n)
				}
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	}()
	<-leading // the hold commits first, alone, while the others come
	start()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

type mark struct {
	Writer int `json:"writer"`
	N      int `json:"n"`
}

// TestGroupCommitKeepsEveryEventInOrder: concurrent writers, each writing
// its events one commit point at a time (some points with several events),
// lose nothing: the outbox holds every event once, at the seq Emit gave,
// seqs without a gap, and each writer's events in the order it wrote them.
func TestGroupCommitKeepsEveryEventInOrder(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	const writers, points = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*points)
	var mu sync.Mutex
	seqOf := map[mark]int64{}
	run := func() {
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				for p := 0; p < points; p++ {
					events := 1 + p%3
					var seqs []int64
					var marks []mark
					err := s.Write(ctx, "bench", func(tx *Tx) error {
						seqs, marks = nil, nil // a function runs once; reset anyway
						for e := 0; e < events; e++ {
							m := mark{w, n + e}
							seq, err := tx.Emit(ctx, "agent.state", m)
							if err != nil {
								return err
							}
							seqs, marks = append(seqs, seq), append(marks, m)
						}
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
					n += events
					mu.Lock()
					for i := range seqs {
						seqOf[marks[i]] = seqs[i]
					}
					mu.Unlock()
				}
			}()
		}
	}
	// The first writers all queue behind a held commit (one group for
	// sure); the rest run free.
	holdQueue(t, s, writers, run)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs, err := s.EventsAfter(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for p := 0; p < points; p++ {
		total += writers * (1 + p%3)
	}
	if len(evs) != total || len(seqOf) != total {
		t.Fatalf("outbox holds %d events, writers were given %d seqs, want %d", len(evs), len(seqOf), total)
	}
	next := map[int]int{}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d, want %d (no gap)", i, ev.Seq, i+1)
		}
		var m mark
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			t.Fatal(err)
		}
		if m.N != next[m.Writer] {
			t.Fatalf("seq %d is writer %d's event %d, want its event %d (its order)", ev.Seq, m.Writer, m.N, next[m.Writer])
		}
		next[m.Writer]++
		if seqOf[m] != ev.Seq {
			t.Errorf("writer %d's event %d was given seq %d, stored at %d", m.Writer, m.N, seqOf[m], ev.Seq)
		}
	}
	if s.LastSeq() != int64(total) {
		t.Errorf("LastSeq = %d, want %d", s.LastSeq(), total)
	}
	// The held start made one group of all the writers at least.
	if g := s.GroupSize(); g <= 1 {
		t.Errorf("GroupSize = %.2f, want more than one commit point a transaction", g)
	}
}

// TestGroupCommitFailureReachesEveryWriter: when the group's transaction
// cannot commit, every writer of the group gets the error, none of their
// rows is in the outbox or reaches a stream, and the store writes again.
func TestGroupCommitFailureReachesEveryWriter(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	// A deferred foreign key is checked at COMMIT: a row breaking it makes
	// the commit itself fail after every function of the group returned nil.
	if _, err := s.db.Exec(`CREATE TABLE test_parent(id INTEGER PRIMARY KEY);
		CREATE TABLE test_child(parent INTEGER REFERENCES test_parent(id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	before := s.LastSeq()
	wake, cancel := s.Subscribe()
	defer cancel()
	const writers = 8
	errs := make([]error, writers)
	var wg sync.WaitGroup
	holdQueue(t, s, writers, func() {
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[w] = s.Write(ctx, fmt.Sprintf("w%d", w), func(tx *Tx) error {
					if _, err := tx.Emit(ctx, "agent.state", mark{w, 0}); err != nil {
						return err
					}
					if w == writers/2 {
						_, err := tx.Exec(ctx, "INSERT INTO test_child(parent) VALUES (42)")
						return err
					}
					return nil
				})
			}()
			// Queue them in order. The last one's coming lets the hold
			// commit, after which the queue empties: no wait for it.
			for w < writers-1 && s.queued() < w+1 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	})
	wg.Wait()
	for w, err := range errs {
		if err == nil {
			t.Errorf("writer %d: Write = nil, want the group's commit error", w)
		} else if want := fmt.Sprintf("commit w%d: ", w); len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("writer %d: Write = %v, want it to say %q", w, err, want)
		}
	}
	if evs, err := s.EventsAfter(ctx, 0, 100); err != nil || len(evs) != 0 {
		t.Errorf("outbox after the failed group: %d events (%v), want none", len(evs), err)
	}
	if s.LastSeq() != before {
		t.Errorf("LastSeq = %d, want %d", s.LastSeq(), before)
	}
	select {
	case <-wake:
		t.Error("a stream was woken by a group that did not commit")
	default:
	}
	if err := s.Write(ctx, "after", func(tx *Tx) error {
		_, err := tx.Emit(ctx, "agent.state", mark{99, 0})
		return err
	}); err != nil {
		t.Fatalf("Write after the failed group = %v", err)
	}
	if evs, _ := s.EventsAfter(ctx, 0, 100); len(evs) != 1 || evs[0].Seq != 1 {
		t.Errorf("outbox = %v, want the one later event at seq 1", evs)
	}
}

// TestGroupCommitOneWritersErrorIsItsOwn: a function's error, or its
// writer's cancelled context, rolls back that writer's part only; the others
// of the same group commit, in order, without a gap in the seqs.
func TestGroupCommitOneWritersErrorIsItsOwn(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	boom := errors.New("boom")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	const writers = 6
	errs := make([]error, writers)
	var wg sync.WaitGroup
	holdQueue(t, s, writers, func() {
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx := ctx
				if w == 4 {
					wctx = cancelled
				}
				errs[w] = s.Write(wctx, "part", func(tx *Tx) error {
					if _, err := tx.Emit(ctx, "agent.state", mark{w, 0}); err != nil {
						return err
					}
					if w == 1 {
						return boom
					}
					return nil
				})
			}()
			for w < writers-1 && s.queued() < w+1 {
				time.Sleep(100 * time.Microsecond) // in order, as above
			}
		}
	})
	wg.Wait()
	for w, err := range errs {
		switch w {
		case 1:
			if !errors.Is(err, boom) {
				t.Errorf("writer 1: Write = %v, want boom", err)
			}
		case 4:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("writer 4: Write = %v, want context.Canceled", err)
			}
		default:
			if err != nil {
				t.Errorf("writer %d: Write = %v, want nil", w, err)
			}
		}
	}
	evs, err := s.EventsAfter(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, fmt.Sprintf("%d %s", ev.Seq, ev.Data))
	}
	want := []string{`1 {"writer":0,"n":0}`, `2 {"writer":2,"n":0}`, `3 {"writer":3,"n":0}`, `4 {"writer":5,"n":0}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outbox (-want +got):\n%s", diff)
	}
}

// TestRecentIsTheTable: what EventsAfter gives from the rows it keeps is
// what the outbox table holds, for every cursor and limit: through group
// commits with a part rolled back, an outbox moved on by CatchUp, and the
// oldest rows dropped from what is kept.
func TestRecentIsTheTable(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	check := func(when string) {
		t.Helper()
		last := s.LastSeq()
		// Every cursor of a short outbox; of a long one, those around the
		// rows kept and its ends, and some between.
		var cursors []int64
		for after := int64(0); after <= last+1; after++ {
			if last < 100 || after%251 == 0 || after+3 >= last || (after-s.recentFloor)*(after-s.recentFloor) <= 4 {
				cursors = append(cursors, after)
			}
		}
		for _, after := range cursors {
			for _, limit := range []int{1, 3, 500} {
				got, err := s.EventsAfter(ctx, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				want, err := s.tableAfter(ctx, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Fatalf("%s: after %d, limit %d (-table +kept):\n%s", when, after, limit, d)
				}
			}
		}
	}
	emit := func(n int) func(tx *Tx) error {
		return func(tx *Tx) error {
			for i := 0; i < n; i++ {
				if _, err := tx.Emit(ctx, "agent.state", mark{N: i}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := s.Write(ctx, "one", emit(3)); err != nil {
		t.Fatal(err)
	}
	check("after a commit")
	boom := errors.New("boom")
	var wg sync.WaitGroup
	holdQueue(t, s, 3, func() {
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Write(ctx, "part", func(tx *Tx) error {
					if err := emit(2)(tx); err != nil {
						return err
					}
					if w == 1 {
						return boom
					}
					return nil
				})
			}()
		}
	})
	wg.Wait()
	check("after a group commit with a part rolled back")
	if _, err := s.CatchUp(ctx, s.LastSeq()+5); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, "after the reset", emit(2)); err != nil {
		t.Fatal(err)
	}
	check("after the outbox moved on")
	for i := 0; i < 3; i++ {
		if err := s.Write(ctx, "many", emit(maxRecent/2)); err != nil {
			t.Fatal(err)
		}
	}
	if s.recentFloor == 0 {
		t.Fatal("nothing was dropped from the rows kept")
	}
	check("after the oldest rows were dropped")
	// One row larger than all that is kept: nothing is kept after it, and
	// the rows are read from the table.
	big := strings.Repeat("x", maxRecentBytes+1)
	if err := s.Write(ctx, "big", func(tx *Tx) error {
		_, err := tx.Emit(ctx, "tool.called", map[string]string{"output": big})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if s.recentBytes > maxRecentBytes || s.recentFloor != s.LastSeq() {
		t.Fatalf("after a row of %d bytes: %d bytes kept, floor %d of %d", len(big), s.recentBytes, s.recentFloor, s.LastSeq())
	}
	check("after a row larger than what is kept")
	if err := s.Write(ctx, "after the big one", emit(2)); err != nil {
		t.Fatal(err)
	}
	check("after rows that follow it")
}
