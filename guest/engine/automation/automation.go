// Package automation runs the Dot's own scheduled automations (ref 8.8): it
// keeps the jobs in the engine's database (the cron tool's CronStore), fires
// each due job once as a durable inbound row, automation.fired under the id
// cron:<job>:<time>, that the chat answers, and reports the earliest next run
// with automation.next_run only when that value changes.
//
// A job's firing and its next run commit in one transaction, so a kill
// between the two cannot exist: a firing is recorded once and the job moves
// on once. A run that came due while no engine ran is made once at start,
// and its next run is counted from that moment (never once per missed
// occurrence).
package automation

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/engine/tools"
	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Kicker is told when a firing waits for the chat.
type Kicker interface{ Kick() }

// Service is the Dot's cron service.
type Service struct {
	st   *store.Store
	kick Kicker
	now  func() time.Time
	log  *slog.Logger

	wake chan struct{}
}

// New returns the service over the store. now may be nil.
func New(st *store.Store, kick Kicker, now func() time.Time, log *slog.Logger) *Service {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Service{st: st, kick: kick, now: now, log: log, wake: make(chan struct{}, 1)}
}

var _ tools.CronStore = (*Service)(nil)

const kvNextRun = "automation_next_run"

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// nextRun is a job's next run after from; nil when it will not run again.
func nextRun(j tools.CronJob, from time.Time, ran bool) (*int64, error) {
	var t time.Time
	switch {
	case j.EverySeconds > 0:
		t = from.Add(time.Duration(j.EverySeconds) * time.Second)
	case j.CronExpr != "":
		sched, err := tools.ScheduleOf(j)
		if err != nil {
			return nil, err
		}
		t = sched.Next(from)
		if t.IsZero() {
			return nil, nil
		}
	default:
		if ran || j.At.IsZero() {
			return nil, nil // a one-time job is over once it ran
		}
		t = j.At
	}
	ms := t.UnixMilli()
	return &ms, nil
}

// AddJob adds a job; a name in use wraps tools.ErrCronJobExists.
func (s *Service) AddJob(ctx context.Context, j tools.CronJob) error {
	now := s.now()
	next, err := nextRun(j, now, false)
	if err != nil {
		return err
	}
	var atMS any
	if !j.At.IsZero() {
		atMS = j.At.UnixMilli()
	}
	err = s.st.Write(ctx, "cron-add", func(tx *store.Tx) error {
		res, err := tx.Exec(ctx, `INSERT INTO dots_cron_jobs(name, every_s, cron_expr, tz, at_ms, message, next_run_ms, created_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO NOTHING`,
			j.Name, j.EverySeconds, j.CronExpr, j.TZ, atMS, j.Message, next, now.UnixMilli())
		if err != nil {
			return fmt.Errorf("store automation %q: %w", j.Name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %q", tools.ErrCronJobExists, j.Name)
		}
		return s.reportNextRun(ctx, tx)
	})
	if err == nil {
		s.poke()
	}
	return err
}

// RemoveJob removes a job; an unknown name wraps tools.ErrCronJobNotFound.
func (s *Service) RemoveJob(ctx context.Context, name string) error {
	err := s.st.Write(ctx, "cron-remove", func(tx *store.Tx) error {
		res, err := tx.Exec(ctx, "DELETE FROM dots_cron_jobs WHERE name = ?", name)
		if err != nil {
			return fmt.Errorf("remove automation %q: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %q", tools.ErrCronJobNotFound, name)
		}
		return s.reportNextRun(ctx, tx)
	})
	if err == nil {
		s.poke()
	}
	return err
}

type row struct {
	job      tools.CronJob
	next     sql.NullInt64
	enabled  bool
	createdM int64
}

func scanJobs(ctx context.Context, q interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}) ([]row, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, every_s, cron_expr, tz, at_ms, message, enabled, next_run_ms, created_ms
		FROM dots_cron_jobs ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read automations: %w", err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		var at sql.NullInt64
		if err := rows.Scan(&r.job.Name, &r.job.EverySeconds, &r.job.CronExpr, &r.job.TZ, &at, &r.job.Message, &r.enabled,
			&r.next, &r.createdM); err != nil {
			return nil, fmt.Errorf("read automation: %w", err)
		}
		if at.Valid {
			r.job.At = time.UnixMilli(at.Int64)
		}
		if r.next.Valid {
			r.job.NextRunAt = time.UnixMilli(r.next.Int64)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

type txQuerier struct{ tx *store.Tx }

func (t txQuerier) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.tx.Query(ctx, q, args...)
}

// ListJobs lists the jobs by name with their next runs.
func (s *Service) ListJobs(ctx context.Context) ([]tools.CronJob, error) {
	var rows []row
	err := s.st.Read(ctx, func(q store.Querier) error {
		var err error
		rows, err = scanJobs(ctx, q)
		return err
	})
	out := make([]tools.CronJob, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.job)
	}
	return out, err
}

// reportNextRun emits automation.next_run when the earliest next run of an
// enabled job differs from the one last reported, kept in dots_kv in the
// same transaction (ref 5.4).
func (s *Service) reportNextRun(ctx context.Context, tx *store.Tx) error {
	var next sql.NullInt64
	if err := tx.QueryRow(ctx, "SELECT MIN(next_run_ms) FROM dots_cron_jobs WHERE enabled = 1 AND next_run_ms IS NOT NULL").Scan(&next); err != nil {
		return fmt.Errorf("read the earliest automation: %w", err)
	}
	value := "null"
	var ev protocol.AutomationNextRun
	if next.Valid {
		value = strconv.FormatInt(next.Int64, 10)
		ev.NextRunAtMS = &next.Int64
	}
	last, known, err := tx.KV(ctx, kvNextRun)
	if err != nil {
		return err
	}
	// A computer that never had a job has said nothing, which the host takes
	// as null: no event for null until a value was reported.
	if last == value || (!known && value == "null") {
		return nil
	}
	if _, err := tx.Emit(ctx, protocol.EventAutomationNextRun, ev); err != nil {
		return err
	}
	return tx.SetKV(ctx, kvNextRun, value)
}

// Run fires due jobs until ctx ends. It is stopped before the engine, so no
// firing falls on a stopped engine.
func (s *Service) Run(ctx context.Context) error {
	for {
		wait, err := s.tick(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error("automations", "err", err)
			wait = time.Minute
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-s.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// Tick fires every due job once and returns how long until the next one.
func (s *Service) tick(ctx context.Context) (time.Duration, error) {
	now := s.now()
	fired := false
	var earliest *int64
	err := s.st.Write(ctx, "cron-fire", func(tx *store.Tx) error {
		fired, earliest = false, nil
		jobs, err := scanJobs(ctx, txQuerier{tx})
		if err != nil {
			return err
		}
		for _, r := range jobs {
			if !r.enabled || !r.next.Valid {
				continue
			}
			if r.next.Int64 > now.UnixMilli() {
				if earliest == nil || r.next.Int64 < *earliest {
					v := r.next.Int64
					earliest = &v
				}
				continue
			}
			id := fmt.Sprintf("cron:%s:%d", r.job.Name, r.next.Int64)
			data, err := json.Marshal(work.AutomationFired{Job: r.job.Name, Message: r.job.Message, AtMS: r.next.Int64})
			if err != nil {
				return err
			}
			if _, err := work.InsertInbound(ctx, tx, id, work.TypeAutomationFired, now.UTC().Format(time.RFC3339Nano), data, "pending"); err != nil {
				return err
			}
			next, err := nextRun(r.job, now, true)
			if err != nil {
				return fmt.Errorf("next run of %q: %w", r.job.Name, err)
			}
			if _, err := tx.Exec(ctx, "UPDATE dots_cron_jobs SET next_run_ms = ?, last_run_ms = ? WHERE name = ?",
				next, now.UnixMilli(), r.job.Name); err != nil {
				return fmt.Errorf("move automation %q on: %w", r.job.Name, err)
			}
			if next != nil && (earliest == nil || *next < *earliest) {
				v := *next
				earliest = &v
			}
			fired = true
		}
		return s.reportNextRun(ctx, tx)
	})
	if err != nil {
		return 0, err
	}
	if fired && s.kick != nil {
		s.kick.Kick()
	}
	if earliest == nil {
		return time.Hour, nil
	}
	d := time.UnixMilli(*earliest).Sub(s.now())
	if d < 0 {
		d = 0
	}
	// Wake at least once a minute: a clock that jumps (a VM resumed) is
	// noticed without waiting for an old timer.
	if d > time.Minute {
		d = time.Minute
	}
	return d, nil
}
