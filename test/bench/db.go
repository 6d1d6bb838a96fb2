package bench

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/hostagent/paths"
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
func readDB(ctx context.Context, home paths.Home, pattern string) (dbStats, error) {
	dsn := url.URL{
		Scheme:   "postgres",
		User:     url.User(dbUser),
		Path:     "/" + dbName,
		RawQuery: url.Values{"host": {home.Run()}, "sslmode": {"disable"}}.Encode(),
	}
	conn, err := pgx.Connect(ctx, dsn.String())
	if err != nil {
		return dbStats{}, fmt.Errorf("connect to the managed PostgreSQL on %s: %w", home.Run(), err)
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
