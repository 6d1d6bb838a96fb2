package work

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
)

// TestChatDays: after a turn the chat is read from the first UTC day
// holding a message not written yet, every day it reads whole, also when
// the clock went back (a newer message on an older day); what it kept is
// read again only when that first day changes.
func TestChatDays(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	day := func(d, h int) time.Time { return time.Date(2026, 3, d, h, 0, 0, 0, time.UTC) }
	n := 0
	add := func(when time.Time) {
		t.Helper()
		n++
		st.SetClock(func() time.Time { return when })
		if err := st.Write(ctx, "test", func(tx *store.Tx) error {
			_, err := appendMessage(ctx, tx, chatSession, Message{Role: "user", Content: fmt.Sprint("m", n)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	load := func(c *chatDays, after int64) []string {
		t.Helper()
		var got []string
		err := st.Read(ctx, func(q store.Querier) error {
			msgs, err := c.load(ctx, q, chatSession, after)
			for _, m := range msgs {
				got = append(got, m.Content)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// ids 1..5 in this order.
	for _, when := range []time.Time{day(1, 9), day(1, 23), day(2, 1), day(3, 8), day(2, 22)} {
		add(when)
	}
	tests := map[string]struct {
		after int64
		want  []string
	}{
		"nothing written yet: all":                {0, []string{"m1", "m2", "m3", "m4", "m5"}},
		"a new message on day 1: days 1 on":       {1, []string{"m1", "m2", "m3", "m4", "m5"}},
		"the clock went back to day 2: days 2 on": {4, []string{"m3", "m4", "m5"}},
		"new on day 2 and 3: days 2 on":           {2, []string{"m3", "m4", "m5"}},
		"nothing new: none":                       {5, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, load(&chatDays{}, tc.after)); diff != "" {
				t.Errorf("load(after %d) (-want +got):\n%s", tc.after, diff)
			}
		})
	}
	// One chatDays turn after turn, as the engine keeps it.
	var c chatDays
	steps := []struct {
		add   time.Time // a message stored before the step, when set
		after int64     // what the files were written with
		want  []string
	}{
		{after: 5, want: nil},
		{add: day(3, 9), after: 5, want: []string{"m4", "m6"}},                                // m6: day 3 read
		{add: day(3, 10), after: 6, want: []string{"m4", "m6", "m7"}},                         // kept, m7 read
		{add: day(3, 11), after: 6, want: []string{"m4", "m6", "m7", "m8"}},                   // a file not written: kept still
		{add: day(2, 23), after: 8, want: []string{"m3", "m4", "m5", "m6", "m7", "m8", "m9"}}, // back to day 2: read again
	}
	for i, step := range steps {
		if !step.add.IsZero() {
			add(step.add)
		}
		if diff := cmp.Diff(step.want, load(&c, step.after)); diff != "" {
			t.Errorf("step %d: load(after %d) (-want +got):\n%s", i, step.after, diff)
		}
	}
}

// TestChatThread: the chat's thread as kept between requests is the thread
// as read whole: new messages come, a new summary's cut is followed, and a
// cleared result is seen once what was kept is forgotten.
func TestChatThread(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	write := func(f func(tx *store.Tx) error) {
		t.Helper()
		if err := st.Write(ctx, "test", f); err != nil {
			t.Fatal(err)
		}
	}
	add := func(role, content string) {
		t.Helper()
		write(func(tx *store.Tx) error {
			_, err := appendMessage(ctx, tx, chatSession, Message{Role: role, Content: content})
			return err
		})
	}
	var c chatThread
	check := func(step string, upto int64) {
		t.Helper()
		var kept, whole []string
		err := st.Read(ctx, func(q store.Querier) error {
			a, err := c.load(ctx, q, upto)
			if err != nil {
				return err
			}
			b, err := loadMessages(ctx, q, chatSession, upto)
			for _, m := range a {
				kept = append(kept, fmt.Sprintf("%d %s %s %v", m.ID, m.Role, m.Content, m.Cleared))
			}
			for _, m := range b {
				whole = append(whole, fmt.Sprintf("%d %s %s %v", m.ID, m.Role, m.Content, m.Cleared))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(whole) == 0 && step != "empty" {
			t.Fatalf("%s: the thread is empty", step)
		}
		if diff := cmp.Diff(whole, kept); diff != "" {
			t.Errorf("%s: kept thread (-read whole +kept):\n%s", step, diff)
		}
	}
	check("empty", 0)
	add("user", "hello")
	add("assistant", "hi")
	check("first", 0)
	add("tool", "a long result")
	add("user", "more")
	check("newer", 0)
	write(func(tx *store.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE messages SET cleared = 1 WHERE content = 'a long result'")
		return err
	})
	c.forget()
	check("cleared", 0)
	add("assistant", "after the summary")
	check("a summary up to 2", 2)
	add("user", "last")
	check("newer after the summary", 2)
}

// TestArrivalNumbers: accepted inputs are numbered in the order accepted,
// one after another; an id already held is not numbered again.
func TestArrivalNumbers(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"a", "b", "a", "c"} {
		if err := st.Write(ctx, "inbound", func(tx *store.Tx) error {
			_, err := InsertInbound(ctx, tx, id, "user.message", "2026-11-30T12:00:00Z", []byte(`{"text":"hi"}`), inboundPending)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := st.Read(ctx, func(q store.Querier) error {
		rows, err := q.QueryContext(ctx, "SELECT id, arrival FROM dots_inbound ORDER BY arrival")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var arrival int64
			if err := rows.Scan(&id, &arrival); err != nil {
				return err
			}
			got = append(got, fmt.Sprint(id, arrival))
		}
		return rows.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a1", "b2", "c3"}, got); diff != "" {
		t.Errorf("arrivals (-want +got):\n%s", diff)
	}
}
