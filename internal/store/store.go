// Package store is the pgx access to the control plane's own tables
// (DESIGN.md 4): the event log (`events`, ref 9.1) and the host-to-guest
// outbox (`inbound_events`, ref 9.2). Writes are idempotent: a row derived
// from a resource has a deterministic id and is inserted with ON CONFLICT DO
// NOTHING, so a control plane killed between two writes converges on its next
// reconcile without storing or sending anything twice.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/pgtext"
	"github.com/invisible-dots/invisible-dots/internal/postgres/migrate"
)

// Dot identifies a Dot's rows: namespace and name for people, the UID for the
// rows themselves (a Dot made again under the same name starts afresh).
type Dot struct {
	Namespace string
	Name      string
	UID       string
}

func (d Dot) valid() error {
	if d.Namespace == "" || d.Name == "" || d.UID == "" {
		return fmt.Errorf("dot %s/%s (uid %q) lacks its namespace, name or uid", d.Namespace, d.Name, d.UID)
	}
	return nil
}

// Source says who told of an event.
type Source string

const (
	SourceHost  Source = "host"
	SourceGuest Source = "guest"
)

// Event is one row of the event log.
type Event struct {
	ID   int64
	Dot  Dot
	Type string
	// Data is the event's JSON body; empty means {}.
	Data   json.RawMessage
	Source Source
	// GuestSeq is the guest's sequence number of a guest event; a guest event
	// seen again (same Dot, same GuestSeq) is not stored twice. Nil for the
	// host's events.
	GuestSeq  *int64
	CreatedAt time.Time
}

// Store reads and writes the tables through a pgx pool.
type Store struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	wakeups map[string]*Changes // Wakeups, by channel
}

// New returns a Store on pool (postgres.Instance.Pool).
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// AppendEvents stores events in one transaction, in order, and returns the
// ones it stored with their ids; those already stored (a guest sequence number
// or a channel message id seen before) are left out. Event ids become visible
// in id order: the transaction takes the events lock before its first id is
// drawn and holds it to commit (ref 9.1), so a reader that resumes after id N
// never misses a smaller id committed later.
func (s *Store) AppendEvents(ctx context.Context, events ...Event) ([]Event, error) {
	var stored []Event
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		stored, err = AppendEventsTx(ctx, tx, events...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return stored, nil
}

// AppendEventsTx is AppendEvents inside the caller's transaction, for a change
// stored together with its event. Insert the event before changing other rows
// (ref 9.1): the events lock must not be waited for while holding row locks.
// Stored events notify EventsChannel, delivered when the transaction commits.
func AppendEventsTx(ctx context.Context, tx pgx.Tx, events ...Event) ([]Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	for _, e := range events {
		if err := e.Dot.valid(); err != nil {
			return nil, err
		}
		if e.Type == "" {
			return nil, fmt.Errorf("event of dot %s/%s has no type", e.Dot.Namespace, e.Dot.Name)
		}
		if e.Source != SourceHost && e.Source != SourceGuest {
			return nil, fmt.Errorf("event %s of dot %s/%s has source %q, want host or guest", e.Type, e.Dot.Namespace, e.Dot.Name, e.Source)
		}
	}
	if err := lockEvents(ctx, tx); err != nil {
		return nil, err
	}
	var stored []Event
	for _, e := range events {
		// Text PostgreSQL cannot hold is escaped, never an error
		// (pgtext): one NUL in a tool's output must not stop a log.
		e.Type = pgtext.String(e.Type)
		e.Data = storableJSON(e.Data)
		err := tx.QueryRow(ctx, `
INSERT INTO events (dot_namespace, dot_name, dot_uid, type, data, source, guest_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT DO NOTHING
RETURNING id, created_at`,
			e.Dot.Namespace, e.Dot.Name, e.Dot.UID, e.Type, e.Data, string(e.Source), e.GuestSeq,
		).Scan(&e.ID, &e.CreatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store event %s of dot %s/%s: %w", e.Type, e.Dot.Namespace, e.Dot.Name, err)
		}
		stored = append(stored, e)
	}
	if len(stored) > 0 {
		if err := notifyEvents(ctx, tx, stored[len(stored)-1].ID); err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// lockEvents takes the events lock for the rest of the transaction (ref
// 9.1). Taking it again in the same transaction is free.
func lockEvents(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", migrate.LockClass, migrate.LockEvents); err != nil {
		return fmt.Errorf("take the events lock: %w", err)
	}
	return nil
}

// InTx runs fn in one transaction, committed when fn returns nil: for a
// change and its event stored together (AppendEventsTx, EnqueueTx).
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// Refuser makes the stand-in stored, under the same guest sequence number,
// for a guest event PostgreSQL refuses to store even once its text was made
// storable (a number beyond numeric's range, JSON it cannot read): reason
// says why. The stand-in must hold no more than the reason and what
// identifies the event.
type Refuser func(e Event, reason string) Event

// AppendGuestEvents stores a batch of one Dot's guest events, each with its
// guest sequence number, and returns the ones stored (a number already stored
// is left out, so a batch sent again stores nothing twice) and the Dot's
// cursor: the highest guest sequence number stored, read in the same
// transaction. An event PostgreSQL refuses for what it holds is stored as
// refuse makes it, so one bad event never holds back the ones after it; with
// a nil refuse the batch fails.
func (s *Store) AppendGuestEvents(ctx context.Context, dot Dot, events []Event, refuse Refuser) ([]Event, int64, error) {
	if err := dot.valid(); err != nil {
		return nil, 0, err
	}
	for _, e := range events {
		if e.Dot != dot || e.Source != SourceGuest || e.GuestSeq == nil {
			return nil, 0, fmt.Errorf("guest event %s of a batch of dot %s/%s is of another Dot, not the guest's or without its sequence number",
				e.Type, dot.Namespace, dot.Name)
		}
	}
	stored, cursor, err := s.appendGuestEvents(ctx, dot, events, nil)
	if err != nil && refuse != nil && refusedData(err) {
		// Again, each event on its own, to find those refused.
		stored, cursor, err = s.appendGuestEvents(ctx, dot, events, refuse)
	}
	return stored, cursor, err
}

func (s *Store) appendGuestEvents(ctx context.Context, dot Dot, events []Event, refuse Refuser) ([]Event, int64, error) {
	var (
		stored []Event
		cursor int64
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if refuse == nil {
			var err error
			if stored, err = AppendEventsTx(ctx, tx, events...); err != nil {
				return err
			}
		} else {
			for _, e := range events {
				got, err := appendOrRefuse(ctx, tx, e, refuse)
				if err != nil {
					return err
				}
				stored = append(stored, got...)
			}
		}
		err := tx.QueryRow(ctx, "SELECT COALESCE(max(guest_seq), 0) FROM events WHERE dot_uid = $1", dot.UID).Scan(&cursor)
		if err != nil {
			return fmt.Errorf("read the cursor of dot %s/%s: %w", dot.Namespace, dot.Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return stored, cursor, nil
}

// appendOrRefuse stores e inside a savepoint of tx, or its stand-in when
// PostgreSQL refuses what e holds.
func appendOrRefuse(ctx context.Context, tx pgx.Tx, e Event, refuse Refuser) ([]Event, error) {
	var stored []Event
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		var err error
		stored, err = AppendEventsTx(ctx, sp, e)
		return err
	})
	if err == nil || !refusedData(err) {
		return stored, err
	}
	stand := refuse(e, "PostgreSQL cannot store it: "+pgtext.String(pgMessage(err)))
	stand.Dot, stand.Source, stand.GuestSeq = e.Dot, SourceGuest, e.GuestSeq
	return AppendEventsTx(ctx, tx, stand)
}

// refusedData says whether err is PostgreSQL refusing a value for what it
// holds (SQLSTATE class 22, data exception; 54, a program limit such as a
// jsonb too large), as opposed to a database that is down or busy.
func refusedData(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	return pe.Code[:2] == "22" || pe.Code[:2] == "54"
}

func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// EventQuery selects a page of one Dot's events.
type EventQuery struct {
	DotUID string
	// Types keeps the events of these types; empty keeps every type.
	Types []string
	// After keeps the events with larger ids; 0 keeps all.
	After int64
	// Before keeps the events with smaller ids; 0 keeps all.
	Before int64
	// Desc reads newest first, so that Limit keeps the newest.
	Desc bool
	// Limit is the most events returned, at least 1.
	Limit int
	// Tools narrows the tool.called events to these tools (data.tool);
	// the other types pass. Empty keeps every tool.
	Tools []string
	// TaskID keeps the events whose data.task_id it is; empty keeps all.
	TaskID string
}

// Events reads a page of a Dot's events in id order (newest first with Desc).
func (s *Store) Events(ctx context.Context, q EventQuery) ([]Event, error) {
	if q.Limit <= 0 {
		return nil, fmt.Errorf("read events: limit %d, want at least 1", q.Limit)
	}
	sql, args := eventsPage(q)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read events of dot %s: %w", q.DotUID, err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read events of dot %s: %w", q.DotUID, err)
	}
	return events, nil
}

// eventsPage is the statement of Events and its arguments.
func eventsPage(q EventQuery) (string, []any) {
	order := "ASC"
	if q.Desc {
		order = "DESC"
	}
	types, tools := q.Types, q.Tools
	if types == nil {
		types = []string{}
	}
	if tools == nil {
		tools = []string{}
	}
	return `
SELECT id, dot_namespace, dot_name, dot_uid, type, data, source, guest_seq, created_at
FROM events
WHERE dot_uid = $1 AND (cardinality($2::text[]) = 0 OR type = ANY($2)) AND id > $3 AND ($4::bigint = 0 OR id < $4::bigint)
  AND (cardinality($6::text[]) = 0 OR type <> 'tool.called' OR data->>'tool' = ANY($6))
  AND ($7::text = '' OR data->>'task_id' = $7::text)
ORDER BY id ` + order + ` LIMIT $5`, []any{q.DotUID, types, q.After, q.Before, q.Limit, tools, q.TaskID}
}

func scanEvent(r pgx.CollectableRow) (Event, error) {
	var e Event
	var src string
	err := r.Scan(&e.ID, &e.Dot.Namespace, &e.Dot.Name, &e.Dot.UID, &e.Type, &e.Data, &src, &e.GuestSeq, &e.CreatedAt)
	e.Source = Source(src)
	return e, err
}

// EventsAfter returns up to limit events of the Dot with ids above afterID,
// oldest first.
func (s *Store) EventsAfter(ctx context.Context, dotUID string, afterID int64, limit int) ([]Event, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("read events: limit %d, want at least 1", limit)
	}
	rows, err := s.pool.Query(ctx, `
SELECT id, dot_namespace, dot_name, dot_uid, type, data, source, guest_seq, created_at
FROM events WHERE dot_uid = $1 AND id > $2 ORDER BY id LIMIT $3`, dotUID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of dot %s: %w", dotUID, err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read events of dot %s: %w", dotUID, err)
	}
	return events, nil
}

// LastGuestSeq is the highest guest sequence number stored for the Dot, 0 when
// none: where the event pump resumes reading the guest.
func (s *Store) LastGuestSeq(ctx context.Context, dotUID string) (int64, error) {
	var seq int64
	err := s.pool.QueryRow(ctx, "SELECT COALESCE(max(guest_seq), 0) FROM events WHERE dot_uid = $1", dotUID).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("read the last guest sequence number of dot %s: %w", dotUID, err)
	}
	return seq, nil
}

// DeleteDot removes every row of the Dot, for its finalizer.
func (s *Store) DeleteDot(ctx context.Context, dotUID string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM inbound_events WHERE dot_uid = $1", dotUID); err != nil {
			return fmt.Errorf("delete the outbox of dot %s: %w", dotUID, err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM events WHERE dot_uid = $1", dotUID); err != nil {
			return fmt.Errorf("delete the events of dot %s: %w", dotUID, err)
		}
		// Its channels' people and codes go with it (ref 9.8).
		for _, table := range channelTables {
			if _, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE dot_uid = $1", dotUID); err != nil {
				return fmt.Errorf("delete the channel rows (%s) of dot %s: %w", table, dotUID, err)
			}
		}
		return nil
	})
}

// TaskCreatedID is the outbox id of a task's task.created for run (DESIGN.md
// 4): the same task and run always give the same id.
func TaskCreatedID(taskUID string, run int) string {
	return "task-" + taskUID + "-" + strconv.Itoa(run)
}

// ApprovalDecisionID is the outbox id of an approval's decision.
func ApprovalDecisionID(approvalUID string) string {
	return "approval-" + approvalUID
}

// MessageID is the outbox id of the user.message that delivers the person's
// message logged as event eventID: the Dots API's message id
// (wire.MessageID), which a client knows from the event it posted.
func MessageID(eventID int64) string { return wire.MessageID(eventID) }

// storableJSON is b as jsonb can hold it (pgtext), {} when empty.
func storableJSON(b json.RawMessage) json.RawMessage {
	out, _ := pgtext.JSON(jsonOrEmpty(b))
	return out
}

func jsonOrEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return b
}
