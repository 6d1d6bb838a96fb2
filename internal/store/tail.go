package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// EventsChannel is the PostgreSQL notification channel of the event log: a
// transaction that stored events notifies it once, with the highest id it
// stored, and PostgreSQL delivers the notification when the transaction
// commits. The payload is a hint only: a listener reads the table after the
// last id it has (EventsSince), so order and completeness come from the
// table (ids become visible in id order, AppendEvents), never from the
// notifications, which a lost connection may drop.
const EventsChannel = "dots_events"

// notifyEvents tells EventsChannel's listeners that events up to lastID
// were stored, once the transaction commits.
func notifyEvents(ctx context.Context, tx pgx.Tx, lastID int64) error {
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", EventsChannel, strconv.FormatInt(lastID, 10)); err != nil {
		return fmt.Errorf("notify the event log's listeners: %w", err)
	}
	return nil
}

// TailQuery selects the events after an id, of every Dot or of one, for the
// live streams: their replay and the one reader that follows the log.
type TailQuery struct {
	// After keeps the events with larger ids.
	After int64
	// DotUID keeps one Dot's events; empty keeps every Dot's.
	DotUID string
	// Types keeps the events of these types; empty keeps every type.
	Types []string
	// Limit is the most events returned, at least 1.
	Limit int
}

// EventsSince reads the events after q.After in id order. Each filter is
// left out of the statement when unset, rather than written as "$n = ” OR
// ...", so the planner uses the primary key or the (dot_uid, id) index
// whichever filters are given.
func (s *Store) EventsSince(ctx context.Context, q TailQuery) ([]Event, error) {
	if q.Limit <= 0 {
		return nil, fmt.Errorf("read events: limit %d, want at least 1", q.Limit)
	}
	var sql strings.Builder
	sql.WriteString(`SELECT id, dot_namespace, dot_name, dot_uid, type, data, source, guest_seq, created_at
FROM events WHERE id > $1`)
	args := []any{q.After, q.Limit}
	if q.DotUID != "" {
		args = append(args, q.DotUID)
		fmt.Fprintf(&sql, " AND dot_uid = $%d", len(args))
	}
	if len(q.Types) > 0 {
		args = append(args, q.Types)
		fmt.Fprintf(&sql, " AND type = ANY($%d)", len(args))
	}
	sql.WriteString(" ORDER BY id LIMIT $2")
	rows, err := s.pool.Query(ctx, sql.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("read the event log after %d: %w", q.After, err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read the event log after %d: %w", q.After, err)
	}
	return events, nil
}
