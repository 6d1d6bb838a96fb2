package automation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/engine/tools"
	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

type kicks struct{ n int }

func (k *kicks) Kick() { k.n++ }

func events(t *testing.T, st *store.Store, typ string) []string {
	t.Helper()
	evs, err := st.EventsAfter(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, string(e.Data))
		}
	}
	return out
}

func firings(t *testing.T, st *store.Store) []string {
	t.Helper()
	var out []string
	err := st.Read(context.Background(), func(q store.Querier) error {
		rows, err := q.QueryContext(context.Background(), "SELECT id, data FROM dots_inbound WHERE type = ? ORDER BY arrival", work.TypeAutomationFired)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, data string
			if err := rows.Scan(&id, &data); err != nil {
				return err
			}
			var d work.AutomationFired
			json.Unmarshal([]byte(data), &d)
			out = append(out, fmt.Sprintf("%s %s", id, d.Message))
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFiringsNextRunsAndMissedRuns(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), store.FileName)
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: t0}
	k := &kicks{}
	s := New(st, k, clock.Now, nil)

	// A computer that never had a job has said nothing.
	if _, err := s.tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := events(t, st, protocol.EventAutomationNextRun); len(got) != 0 {
		t.Fatalf("next_run events with no job = %q, want none", got)
	}
	if err := s.AddJob(ctx, tools.CronJob{Name: "standup", Message: "post the standup", EverySeconds: 60}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddJob(ctx, tools.CronJob{Name: "standup", Message: "again", EverySeconds: 60}); !errors.Is(err, tools.ErrCronJobExists) {
		t.Errorf("a second job of the same name = %v, want ErrCronJobExists", err)
	}
	at := t0.Add(60 * time.Second).UnixMilli()
	clock.Advance(61 * time.Second)
	s.tick(ctx)
	s.tick(ctx) // the same moment again fires nothing
	// Ten minutes with no engine: one run for the missed ones, not ten.
	clock.Advance(10 * time.Minute)
	st.Close()
	st, err = store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s = New(st, k, clock.Now, nil)
	s.tick(ctx)
	want := []string{
		fmt.Sprintf("cron:standup:%d post the standup", at),
		fmt.Sprintf("cron:standup:%d post the standup", t0.Add(121*time.Second).UnixMilli()),
	}
	if diff := cmp.Diff(want, firings(t, st)); diff != "" {
		t.Errorf("firings (-want +got):\n%s", diff)
	}
	next := t0.Add(61*time.Second + 10*time.Minute + 60*time.Second).UnixMilli()
	wantNext := []string{
		fmt.Sprintf(`{"next_run_at_ms":%d}`, at),
		fmt.Sprintf(`{"next_run_at_ms":%d}`, t0.Add(121*time.Second).UnixMilli()),
		fmt.Sprintf(`{"next_run_at_ms":%d}`, next),
	}
	if diff := cmp.Diff(wantNext, events(t, st, protocol.EventAutomationNextRun)); diff != "" {
		t.Errorf("automation.next_run (-want +got):\n%s", diff)
	}
	if k.n != 2 {
		t.Errorf("engine kicked %d times, want once per tick that fired (2)", k.n)
	}
	jobs, err := s.ListJobs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].NextRunAt.UnixMilli() != next {
		t.Errorf("ListJobs = %+v, %v", jobs, err)
	}
	if err := s.RemoveJob(ctx, "nope"); !errors.Is(err, tools.ErrCronJobNotFound) {
		t.Errorf("remove unknown = %v", err)
	}
	if err := s.RemoveJob(ctx, "standup"); err != nil {
		t.Fatal(err)
	}
	got := events(t, st, protocol.EventAutomationNextRun)
	if got[len(got)-1] != `{"next_run_at_ms":null}` {
		t.Errorf("after the last job was removed: %s, want null", got[len(got)-1])
	}
}

func TestOneTimeJobRunsOnceLate(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: t0}
	s := New(st, nil, clock.Now, nil)
	if err := s.AddJob(ctx, tools.CronJob{Name: "remind", Message: "call mum", At: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddJob(ctx, tools.CronJob{Name: "daily", Message: "daily", CronExpr: "0 9 * * *"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Hour)
	s.tick(ctx)
	s.tick(ctx)
	got := firings(t, st)
	want := []string{
		fmt.Sprintf("cron:daily:%d daily", time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC).UnixMilli()),
		fmt.Sprintf("cron:remind:%d call mum", t0.Add(time.Hour).UnixMilli()),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("firings (-want +got):\n%s", diff)
	}
	jobs, _ := s.ListJobs(ctx)
	for _, j := range jobs {
		if j.Name == "remind" && !j.NextRunAt.IsZero() {
			t.Errorf("the one-time job has a next run after it ran: %v", j.NextRunAt)
		}
		if j.Name == "daily" && !j.NextRunAt.Equal(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)) {
			t.Errorf("daily next run = %v, want the next 09:00 after now", j.NextRunAt)
		}
	}
}
