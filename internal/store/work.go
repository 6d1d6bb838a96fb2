package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/internal/pgtext"
)

// Decide stores a decision of the control plane: the host events that
// tell of it and its outbox row (when it has one), in one transaction, so
// the guest is told exactly what the log says was decided (ref 9.2). When a
// row of its id exists the decision was stored before (a reconcile after a
// crash, or one that ran on a stale view) and nothing is stored again. It
// returns the events it stored; none when the decision was already there.
func (s *Store) Decide(ctx context.Context, row *Inbound, events ...Event) ([]Event, error) {
	var stored []Event
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if row != nil {
			var seen bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inbound_events WHERE id = $1)", row.ID).Scan(&seen); err != nil {
				return fmt.Errorf("look for %s: %w", row.ID, err)
			}
			if seen {
				return nil
			}
		}
		// The events first (ref 9.1): their lock is never waited for while
		// this transaction holds a row lock.
		var err error
		if stored, err = AppendEventsTx(ctx, tx, events...); err != nil {
			return err
		}
		if row != nil {
			fresh, err := EnqueueTx(ctx, tx, *row)
			if err != nil {
				return err
			}
			if !fresh {
				// Stored by another writer since the look above: this
				// decision's events go with the rollback.
				stored = nil
				return errDecidedMeanwhile
			}
		}
		return nil
	})
	if errors.Is(err, errDecidedMeanwhile) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return stored, nil
}

var errDecidedMeanwhile = errors.New("decided meanwhile")

// DropUnsent drops the row when its send never began, and says whether it
// did: a cancel of a task whose task.created never left drops it (ref 9.2);
// one that may have reached the guest is cancelled there instead.
func (s *Store) DropUnsent(ctx context.Context, id, reason string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE inbound_events SET dropped_at = now(), drop_reason = $2
WHERE id = $1 AND sent_at IS NULL AND delivered_at IS NULL AND dropped_at IS NULL`, id, pgtext.String(reason))
	if err != nil {
		return false, fmt.Errorf("drop %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Undelivered counts the Dot's rows neither delivered nor dropped.
func (s *Store) Undelivered(ctx context.Context, dotUID string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM inbound_events
WHERE dot_uid = $1 AND delivered_at IS NULL AND dropped_at IS NULL`, dotUID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the outbox of dot %s: %w", dotUID, err)
	}
	return n, nil
}

// DotsWithEventsAfter lists the Dots with events above afterID, and the
// highest id seen: what a follower of the whole log reads to know whose
// statuses to compute again. limit bounds the events looked at.
func (s *Store) DotsWithEventsAfter(ctx context.Context, afterID int64, limit int) ([]Dot, int64, error) {
	rows, err := s.pool.Query(ctx, `
SELECT dot_namespace, dot_name, dot_uid, max(id) FROM (
  SELECT id, dot_namespace, dot_name, dot_uid FROM events WHERE id > $1 ORDER BY id LIMIT $2
) recent GROUP BY dot_namespace, dot_name, dot_uid`, afterID, limit)
	if err != nil {
		return nil, afterID, fmt.Errorf("read the log after %d: %w", afterID, err)
	}
	var dots []Dot
	last := afterID
	var d Dot
	var top int64
	_, err = pgx.ForEachRow(rows, []any{&d.Namespace, &d.Name, &d.UID, &top}, func() error {
		dots = append(dots, d)
		last = max(last, top)
		return nil
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, afterID, fmt.Errorf("read the log after %d: %w", afterID, err)
	}
	return dots, last, nil
}

// LastEventID is the log's newest id, 0 when it is empty.
func (s *Store) LastEventID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, "SELECT COALESCE(max(id), 0) FROM events").Scan(&id); err != nil {
		return 0, fmt.Errorf("read the log's last id: %w", err)
	}
	return id, nil
}

// DropUndelivered gives up the outbox rows of a Dot that was deleted:
// nothing is delivered to a guest that is gone. Its log stays.
func (s *Store) DropUndelivered(ctx context.Context, dotUID, reason string) error {
	_, err := s.pool.Exec(ctx, `UPDATE inbound_events SET dropped_at = now(), drop_reason = $2
WHERE dot_uid = $1 AND delivered_at IS NULL AND dropped_at IS NULL`, dotUID, pgtext.String(reason))
	if err != nil {
		return fmt.Errorf("drop the outbox of dot %s: %w", dotUID, err)
	}
	return nil
}

// Namespaces lists the namespaces that have rows in the log or the outbox.
func (s *Store) Namespaces(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT dot_namespace FROM events UNION SELECT dot_namespace FROM inbound_events`)
	if err != nil {
		return nil, fmt.Errorf("list the log's namespaces: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the log's namespaces: %w", err)
	}
	return out, nil
}

// DeleteNamespace removes every row of the namespace's Dots: the history of
// a deleted Dot is kept until its namespace goes.
func (s *Store) DeleteNamespace(ctx context.Context, namespace string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM inbound_events WHERE dot_namespace = $1", namespace); err != nil {
			return fmt.Errorf("delete the outbox of namespace %s: %w", namespace, err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM events WHERE dot_namespace = $1", namespace); err != nil {
			return fmt.Errorf("delete the log of namespace %s: %w", namespace, err)
		}
		return nil
	})
}

// GiveUpTask gives up the Dot's task.created row id (ref 9.2): the row is
// dropped with reason and failed (the host's task.failed of its task) is
// logged, in one transaction. A row delivered or dropped meanwhile is left
// as it is and nothing is logged; it says whether it gave the row up.
func (s *Store) GiveUpTask(ctx context.Context, id, reason string, at time.Time, failed Event) (bool, error) {
	if err := failed.Dot.valid(); err != nil {
		return false, err
	}
	gaveUp := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The events lock before the row's (ref 9.1): it is never waited
		// for while this transaction holds a row lock.
		if err := lockEvents(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE inbound_events SET dropped_at = $3, drop_reason = $4
WHERE id = $1 AND dot_uid = $2 AND task_uid IS NOT NULL AND delivered_at IS NULL AND dropped_at IS NULL`,
			id, failed.Dot.UID, at, pgtext.String(reason))
		if err != nil {
			return fmt.Errorf("give up %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		if _, err := AppendEventsTx(ctx, tx, failed); err != nil {
			return err
		}
		gaveUp = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return gaveUp, nil
}
