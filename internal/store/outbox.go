package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/invisible-dots/invisible-dots/internal/pgtext"
)

// Inbound is one row of the host-to-guest outbox.
type Inbound struct {
	Seq int64
	// ID is deterministic (TaskCreatedID, ApprovalDecisionID, ...): the same
	// decision enqueued twice is one row, and the guest ignores an id it has.
	ID   string
	Dot  Dot
	Type string
	Data json.RawMessage
	// TS is the event's time as the guest sees it; now when zero.
	TS          time.Time
	TaskUID     string
	Run         int
	CreatedAt   time.Time
	SentAt      *time.Time
	DeliveredAt *time.Time
	DroppedAt   *time.Time
	DropReason  string
	Failures    int
	LastError   string
	RetryAt     *time.Time
}

// ErrNotFound is returned for a row that does not exist.
var ErrNotFound = errors.New("not found")

// Enqueue stores in unless a row with its id exists, and says whether it
// stored it.
func (s *Store) Enqueue(ctx context.Context, in Inbound) (bool, error) {
	return enqueue(ctx, s.pool, in)
}

// EnqueueTx is Enqueue inside the caller's transaction, for a row written
// with the decision that made it (ref 9.2).
func EnqueueTx(ctx context.Context, tx pgx.Tx, in Inbound) (bool, error) {
	return enqueue(ctx, tx, in)
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func enqueue(ctx context.Context, db execer, in Inbound) (bool, error) {
	if in.ID == "" || in.Type == "" {
		return false, fmt.Errorf("outbox row of dot %s/%s lacks its id or type", in.Dot.Namespace, in.Dot.Name)
	}
	if err := in.Dot.valid(); err != nil {
		return false, err
	}
	ts := in.TS
	if ts.IsZero() {
		ts = time.Now()
	}
	// A stored row notifies OutboxChannel, which PostgreSQL delivers when
	// the transaction commits: the deliverer hears of it at once.
	tag, err := db.Exec(ctx, `
WITH stored AS (
  INSERT INTO inbound_events (id, dot_namespace, dot_name, dot_uid, type, data, ts, task_uid, run)
  VALUES ($1, $2, $3, $4, $5, $6, $7, NULLIF($8, ''), NULLIF($9, 0))
  ON CONFLICT (id) DO NOTHING
  RETURNING 1)
SELECT pg_notify($10, $11) FROM stored`,
		in.ID, in.Dot.Namespace, in.Dot.Name, in.Dot.UID, pgtext.String(in.Type), storableJSON(in.Data), ts, in.TaskUID, in.Run,
		OutboxChannel, OutboxPayload(in.Dot))
	if err != nil {
		return false, fmt.Errorf("enqueue %s for dot %s/%s: %w", in.ID, in.Dot.Namespace, in.Dot.Name, err)
	}
	return tag.RowsAffected() == 1, nil
}

const inboundColumns = `seq, id, dot_namespace, dot_name, dot_uid, type, data, ts, COALESCE(task_uid, ''),
  COALESCE(run, 0), created_at, sent_at, delivered_at, dropped_at, COALESCE(drop_reason, ''), failures,
  COALESCE(last_error, ''), retry_at`

func scanInbound(r pgx.CollectableRow) (Inbound, error) {
	var in Inbound
	err := r.Scan(&in.Seq, &in.ID, &in.Dot.Namespace, &in.Dot.Name, &in.Dot.UID, &in.Type, &in.Data, &in.TS,
		&in.TaskUID, &in.Run, &in.CreatedAt, &in.SentAt, &in.DeliveredAt, &in.DroppedAt, &in.DropReason,
		&in.Failures, &in.LastError, &in.RetryAt)
	return in, err
}

// Pending returns the Dot's rows neither delivered nor dropped, in the order
// they were enqueued: the deliverer sends them in this order and stops at the
// first failure, so a later event never overtakes an earlier one.
func (s *Store) Pending(ctx context.Context, dotUID string) ([]Inbound, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+inboundColumns+` FROM inbound_events
WHERE dot_uid = $1 AND delivered_at IS NULL AND dropped_at IS NULL ORDER BY seq`, dotUID)
	if err != nil {
		return nil, fmt.Errorf("read the outbox of dot %s: %w", dotUID, err)
	}
	out, err := pgx.CollectRows(rows, scanInbound)
	if err != nil {
		return nil, fmt.Errorf("read the outbox of dot %s: %w", dotUID, err)
	}
	return out, nil
}

// Inbound reads the Dot's outbox row id; ErrNotFound when the Dot has none of
// that id.
func (s *Store) Inbound(ctx context.Context, dotUID, id string) (Inbound, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+inboundColumns+` FROM inbound_events WHERE dot_uid = $1 AND id = $2`, dotUID, id)
	if err != nil {
		return Inbound{}, fmt.Errorf("read outbox row %s: %w", id, err)
	}
	in, err := pgx.CollectExactlyOneRow(rows, scanInbound)
	if errors.Is(err, pgx.ErrNoRows) {
		return Inbound{}, fmt.Errorf("outbox row %s of dot %s: %w", id, dotUID, ErrNotFound)
	}
	if err != nil {
		return Inbound{}, fmt.Errorf("read outbox row %s: %w", id, err)
	}
	return in, nil
}

// DueDots lists the Dots whose first pending row may be sent at now (its
// retry time, if any, came), for the deliverer's periodic pass.
func (s *Store) DueDots(ctx context.Context, now time.Time) ([]Dot, error) {
	rows, err := s.pool.Query(ctx, `
SELECT DISTINCT ON (dot_uid) dot_namespace, dot_name, dot_uid, retry_at
FROM inbound_events WHERE delivered_at IS NULL AND dropped_at IS NULL
ORDER BY dot_uid, seq`)
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	var due []Dot
	var d Dot
	var retry *time.Time
	_, err = pgx.ForEachRow(rows, []any{&d.Namespace, &d.Name, &d.UID, &retry}, func() error {
		if retry == nil || !retry.After(now) {
			due = append(due, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	return due, nil
}

// MarkSent records that a send of the row began, and says whether the row
// may go: one delivered or dropped meanwhile (a cancel that won the race
// with the deliverer, ref 9.2) is not marked and must not be sent. A cancel
// drops a row only while its send never began (DropUnsent), so the two
// statements decide between them, on the row.
func (s *Store) MarkSent(ctx context.Context, id string, at time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE inbound_events SET sent_at = $2
WHERE id = $1 AND delivered_at IS NULL AND dropped_at IS NULL`, id, at)
	if err != nil {
		return false, fmt.Errorf("mark sent %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// MarkDelivered records that the guest accepted the row (it answered 202).
// Marking a delivered row again keeps the first time.
func (s *Store) MarkDelivered(ctx context.Context, id string, at time.Time) error {
	return s.update(ctx, id, "mark delivered",
		"UPDATE inbound_events SET delivered_at = COALESCE(delivered_at, $2), retry_at = NULL WHERE id = $1", at)
}

// RecordFailure counts a send that failed with a known outcome and sets when
// to try again; it returns the failures so far. A send whose outcome is
// unknown is not a failure (ref 9.2): do not record it.
func (s *Store) RecordFailure(ctx context.Context, id, reason string, retryAt time.Time) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `UPDATE inbound_events SET failures = failures + 1, last_error = $2, retry_at = $3
WHERE id = $1 RETURNING failures`, id, pgtext.String(reason), retryAt).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("record a failed send of %s: %w", id, err)
	}
	return n, nil
}

// Drop gives the row up: it is never sent again.
func (s *Store) Drop(ctx context.Context, id, reason string, at time.Time) error {
	return s.update(ctx, id, "drop",
		"UPDATE inbound_events SET dropped_at = COALESCE(dropped_at, $2), drop_reason = COALESCE(drop_reason, $3) WHERE id = $1",
		at, pgtext.String(reason))
}

func (s *Store) update(ctx context.Context, id, what, sql string, args ...any) error {
	tag, err := s.pool.Exec(ctx, sql, append([]any{id}, args...)...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s %s: no such outbox row", what, id)
	}
	return nil
}
