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
