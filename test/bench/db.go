package bench

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// The managed PostgreSQL's superuser and database, as internal/postgres makes
// them; local connections on the home's socket are trusted (the socket's
// directory is the wall).
const (
	dbUser = "postgres"
	dbName = "invisible_dots"
)

// dbStats is what the database holds at one moment.
type dbStats struct {
	// Database is pg_database_size: every table, index and free space the
	// files still hold.
	Database int64
	// Kine is pg_total_relation_size('kine'), the resource store's table with
	// its indexes and TOAST.
	Kine int64
	// Rows is the number of rows of kine; Matching those whose key matches
	// the LIKE pattern asked for.
	Rows, Matching int64
	// DeadRows is kine's dead tuples not yet vacuumed (pg_stat_user_tables).
	DeadRows int64
	// Revision is kine's current revision, CompactRevision the one it has
	// compacted to.
	Revision, CompactRevision int64
}

// readDB reads the resource store's figures from the managed PostgreSQL of
// home, counting the rows whose key matches the LIKE pattern.
func readDB(ctx context.Context, h home.Layout, pattern string) (dbStats, error) {
	conn, err := pgx.Connect(ctx, dsn(h))
	if err != nil {
		return dbStats{}, fmt.Errorf("connect to the managed PostgreSQL on %s: %w", h.Run(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s dbStats
	// n_dead_tup comes from the statistics collector, which may lag by a
	// moment; it explains why the size does not fall when rows are deleted.
	err = conn.QueryRow(ctx, `
		SELECT pg_database_size(current_database()),
		       pg_total_relation_size('kine'),
		       (SELECT count(*) FROM kine),
		       (SELECT count(*) FROM kine WHERE name LIKE $1),
		       COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'kine'), 0),
		       COALESCE((SELECT max(id) FROM kine), 0),
		       COALESCE((SELECT max(prev_revision) FROM kine WHERE name = 'compact_rev_key'), 0)`,
		pattern).Scan(&s.Database, &s.Kine, &s.Rows, &s.Matching, &s.DeadRows, &s.Revision, &s.CompactRevision)
	if err != nil {
		return dbStats{}, fmt.Errorf("read the resource store's size: %w", err)
	}
	return s, nil
}

// sessions describes what every session of the managed PostgreSQL is doing
// and which lock requests wait: when requests time out it tells a stuck
// database (a lock, a full pool) from a slow machine.
func sessions(ctx context.Context, h home.Layout) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn(h))
	if err != nil {
		return fmt.Sprintf("(cannot connect to PostgreSQL to describe its sessions: %v)", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
		SELECT pid, COALESCE(state, ''), COALESCE(wait_event_type || ':' || wait_event, ''),
		       COALESCE(round(extract(epoch FROM now() - xact_start)::numeric, 1)::text, '-'),
		       COALESCE(round(extract(epoch FROM now() - query_start)::numeric, 1)::text, '-'),
		       left(regexp_replace(query, '\s+', ' ', 'g'), 160)
		FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		ORDER BY query_start`)
	if err != nil {
		return fmt.Sprintf("(cannot read pg_stat_activity: %v)", err)
	}
	var sb strings.Builder
	sb.WriteString("PostgreSQL sessions (pid, state, wait, transaction s, query s, query):\n")
	stuckBegins := 0
	for rows.Next() {
		var pid int
		var state, wait, xact, q, query string
		if err := rows.Scan(&pid, &state, &wait, &xact, &q, &query); err != nil {
			return fmt.Sprintf("(cannot read pg_stat_activity: %v)", err)
		}
		fmt.Fprintf(&sb, "  %d %s %s %s %s %s\n", pid, state, wait, xact, q, query)
		if age, err := strconv.ParseFloat(q, 64); err == nil && age > 5 &&
			state == "idle in transaction" && strings.HasPrefix(strings.ToLower(query), "begin") {
			stuckBegins++
		}
	}
	if err := rows.Err(); err != nil {
		fmt.Fprintf(&sb, "  (%v)\n", err)
	}
	if stuckBegins > 0 {
		// kine v0.17.5's Append opens a transaction, then runs its INSERT
		// through the pool (Tx.Insert calls d.queryRow, not the
		// transaction's): with as many concurrent writes as the pool has
		// connections, each holds one and waits for a second.
		fmt.Fprintf(&sb, "%d sessions opened a transaction and sent nothing more for over 5 s: kine's connection pool is exhausted by its own writes (kine Tx.Insert runs outside its transaction); raise MaxOpenConns in internal/apiserver/kine.go above the API server's concurrent writes\n", stuckBegins)
	}
	var waiting int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err == nil {
		fmt.Fprintf(&sb, "lock requests waiting: %d\n", waiting)
	}
	return sb.String()
}

func dsn(h home.Layout) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(dbUser),
		Path:     "/" + dbName,
		RawQuery: url.Values{"host": {h.Run()}, "sslmode": {"disable"}}.Encode(),
	}
	return u.String()
}
