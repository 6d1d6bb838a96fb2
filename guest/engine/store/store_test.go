package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSecondOpenRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, path); !errors.Is(err, ErrOwned) {
		t.Fatalf("second Open = %v, want ErrOwned", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open after Close = %v, want the lock released", err)
	}
	s2.Close()
}

func TestRolledBackEventsNeverStreamed(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wake, cancel := s.Subscribe()
	defer cancel()
	if err := s.Write(ctx, "one", func(tx *Tx) error {
		_, err := tx.Emit(ctx, "agent.started", struct{}{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	<-wake
	boom := fmt.Errorf("boom")
	if err := s.Write(ctx, "two", func(tx *Tx) error {
		if _, err := tx.Emit(ctx, "agent.state", map[string]string{"state": "IDLE"}); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want boom", err)
	}
	if err := s.Write(ctx, "three", func(tx *Tx) error {
		_, err := tx.Emit(ctx, "agent.state", map[string]string{"state": "THINKING"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.EventsAfter(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d %s %s", e.Seq, e.Type, e.Data))
	}
	// The rolled-back row's seq may be reused: it never reached a stream.
	want := []string{`1 agent.started {}`, `2 agent.state {"state":"THINKING"}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outbox (-want +got):\n%s", diff)
	}
	if s.LastSeq() != 2 {
		t.Errorf("LastSeq = %d, want 2", s.LastSeq())
	}
}

// TestQueryAgainWhileRowsOpen: a commit point may run a query again (and
// its one-row form) while the rows of its first run are open; each run
// reads its own rows, whether the query's statement is prepared yet or not.
func TestQueryAgainWhileRowsOpen(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const q = "SELECT key, value FROM dots_kv WHERE key >= ? ORDER BY key"
	if err := s.Write(ctx, "fill", func(tx *Tx) error {
		for _, k := range []string{"a", "b", "c"} {
			if err := tx.SetKV(ctx, k, "v"+k); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var read func(tx *Tx, from string) ([]string, error)
	read = func(tx *Tx, from string) ([]string, error) {
		rows, err := tx.Query(ctx, q, from)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				return nil, err
			}
			out = append(out, k+"="+v)
			if k == "a" {
				// Again, while these rows are open.
				inner, err := read(tx, "b")
				if err != nil {
					return nil, err
				}
				out = append(out, fmt.Sprint(inner))
				var one string
				if err := tx.QueryRow(ctx, q, "c").Scan(&k, &one); err != nil {
					return nil, err
				}
				out = append(out, k+"="+one)
			}
		}
		return out, rows.Err()
	}
	want := []string{"a=va", "[b=vb c=vc]", "c=vc", "b=vb", "c=vc"}
	// The first run notes the query; the next ones run it prepared.
	for i := 0; i < 3; i++ {
		var got []string
		if err := s.Write(ctx, "read", func(tx *Tx) error {
			got, err = read(tx, "a")
			return err
		}); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("run %d (-want +got):\n%s", i+1, diff)
		}
	}
}
