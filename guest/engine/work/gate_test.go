package work

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
)

// TestLastCallsQueryUsesItsIndex: a turn's opening finds the session's last
// message with tool calls through the index of such messages, so its cost
// does not grow with the messages the session added since.
func TestLastCallsQueryUsesItsIndex(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var plan []string
	err = st.Read(ctx, func(q store.Querier) error {
		rows, err := q.QueryContext(ctx, "EXPLAIN QUERY PLAN "+lastCallsQuery, chatSession)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				return err
			}
			plan = append(plan, detail)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(plan, "; "); !strings.Contains(got, "USING INDEX messages_session_calls (session=?)") {
		t.Errorf("plan of the last calls query = %q, want a search of messages_session_calls", got)
	}
}
