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

// TestLoadChatDays: after a turn the chat is read from the first UTC day
// holding a message not written yet, every day it reads whole, also when
// the clock went back (a newer message on an older day).
func TestLoadChatDays(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	day := func(d, h int) time.Time { return time.Date(2026, 3, d, h, 0, 0, 0, time.UTC) }
	// ids 1..5 in this order.
	at := []time.Time{day(1, 9), day(1, 23), day(2, 1), day(3, 8), day(2, 22)}
	for i, when := range at {
		st.SetClock(func() time.Time { return when })
		if err := st.Write(ctx, "test", func(tx *store.Tx) error {
			_, err := appendMessage(ctx, tx, chatSession, Message{Role: "user", Content: fmt.Sprint("m", i+1)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
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
			var got []string
			err := st.Read(ctx, func(q store.Querier) error {
				msgs, err := loadChatDays(ctx, q, chatSession, tc.after)
				for _, m := range msgs {
					got = append(got, m.Content)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("loadChatDays(after %d) (-want +got):\n%s", tc.after, diff)
			}
		})
	}
}
