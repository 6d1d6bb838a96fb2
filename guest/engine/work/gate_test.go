package work

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
)

// TestTurnQueryPlans: the queries of every turn search their index (a cost
// that does not grow with the rows before the ones they read), with their
// parameters written as store's stmt says.
func TestTurnQueryPlans(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tests := map[string]struct {
		reason string
		query  string
		args   []any
		want   string
	}{
		"last calls": {
			reason: "a turn's opening finds the last message with calls among those that have some, not by walking back over the session",
			query:  lastCallsQuery, args: []any{chatSession},
			want: "SEARCH messages USING INDEX messages_session_calls (session=?)",
		},
		"messages after": {
			reason: "the chat's thread and days read only the messages after the newest they hold",
			query:  messagesAfterQuery, args: []any{chatSession, 1},
			want: "SEARCH m USING INDEX messages_session (session=? AND id>?)",
		},
		"messages from": {
			reason: "the chat's days read from the first day to write",
			query:  messagesFromQuery, args: []any{chatSession, 1},
			want: "SEARCH m USING INDEX messages_session_ts (session=? AND ts_ms>?)",
		},
		"first after": {
			reason: "the first day to write is found from the messages after the last written, not by walking the session's days",
			query:  firstAfterQuery, args: []any{chatSession, 1},
			want: "SEARCH messages USING INDEX messages_session (session=? AND id>?)",
		},
		"answered": {
			reason: "the chat's answer finds the message it answers among the transcript's",
			query:  answeredQuery, args: []any{inboundTranscript, "user.message"},
			want: "SEARCH dots_inbound USING INDEX dots_inbound_state (state=?)",
		},
		"pending": {
			reason: "the chat's requests find the waiting inputs among the accepted ones",
			query:  pendingQuery, args: []any{inboundPending},
			want: "SEARCH dots_inbound USING INDEX dots_inbound_state (state=?)",
		},
		"chat work": {
			reason: "the schedule counts the chat's work by the indexes of approvals and inputs, twice a turn",
			query:  chatWorkQuery, args: []any{chatSession, inboundPending, inboundTranscript},
			want: "SEARCH dots_approvals USING COVERING INDEX dots_approvals_session (session=? AND status=?); SCALAR SUBQUERY 2; SEARCH dots_inbound USING COVERING INDEX dots_inbound_state (state=?); SCALAR SUBQUERY 3; SEARCH dots_inbound USING COVERING INDEX dots_inbound_state (state=?); SCALAR SUBQUERY 4; SEARCH dots_approvals USING COVERING INDEX dots_approvals_session (session=? AND status=?)",
		},
		"spend": {
			reason: "a turn reads the session's ledger and its reasoning tokens by their keys, in one statement, twice a turn",
			query:  spendQuery, args: []any{chatSession},
			want: "SEARCH dots_spend USING INDEX sqlite_autoindex_dots_spend_1 (session=?); SCALAR SUBQUERY 2; SEARCH dots_spend USING INDEX sqlite_autoindex_dots_spend_1 (session=?); SCALAR SUBQUERY 3; SEARCH dots_spend_tokens USING INDEX sqlite_autoindex_dots_spend_tokens_1 (session=?)",
		},
		"taint": {
			reason: "a turn's opening reads the session's taint and its allowances by their keys, in one statement",
			query:  taintQuery, args: []any{chatSession},
			want: "SEARCH t USING INDEX sqlite_autoindex_dots_taint_1 (session=?) LEFT-JOIN; SEARCH a USING COVERING INDEX sqlite_autoindex_dots_taint_allowed_1 (session=?) LEFT-JOIN",
		},
		"granted": {
			reason: "the gate finds a granted approval among the session's",
			query:  grantedQuery, args: []any{chatSession, "exec", "{}"},
			want: "SEARCH dots_approvals USING INDEX dots_approvals_session (session=? AND status=?)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var plan []string
			err := st.Read(ctx, func(q store.Querier) error {
				rows, err := q.QueryContext(ctx, "EXPLAIN QUERY PLAN "+tc.query, tc.args...)
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
			if got := strings.Join(plan, "; "); !strings.Contains(got, tc.want) {
				t.Errorf("%s\nplan of %q = %q, want %q in it", tc.reason, tc.query, got, tc.want)
			}
		})
	}
}
