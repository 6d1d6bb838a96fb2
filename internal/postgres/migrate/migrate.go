// Package migrate applies the SQL files of a migrations directory in order
// (ref 9.1): each file in its own transaction, which first takes a
// transaction-scoped advisory lock, so servers migrating one database at the
// same time apply every file once; schema_migrations records what is applied.
package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The advisory lock keys of the control plane. PostgreSQL's two-key form
// keeps them apart from single-key locks other software on a shared database
// may take; LockClass is "dots" in ASCII.
const (
	LockClass int32 = 0x646f7473
	// LockMigrations serializes migration transactions.
	LockMigrations int32 = 1
	// LockControlPlane is held for a server's whole life (one per database).
	LockControlPlane int32 = 2
	// LockEvents orders event ids: held from drawing an id to commit.
	LockEvents int32 = 3
)

// fileName is a migration's name: a number that fixes the order, then words.
var fileName = regexp.MustCompile(`^([0-9]{4,})_[a-z0-9_]+\.sql$`)

// Migration is one SQL file.
type Migration struct {
	Name     string
	SQL      string
	Checksum string
}

// Load reads every *.sql file at fsys's root, in order. A file whose name does
// not follow NNNN_words.sql, or two files with one number, is an error: the
// order must not depend on how names happen to sort.
func Load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	seen := map[string]string{}
	var out []Migration
	for _, name := range names {
		m := fileName.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("migration file %s is not named NNNN_words.sql", name)
		}
		if other, dup := seen[m[1]]; dup {
			return nil, fmt.Errorf("migration files %s and %s have the same number", other, name)
		}
		seen[m[1]] = name
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		out = append(out, Migration{Name: path.Base(name), SQL: string(b), Checksum: hex.EncodeToString(sum[:])})
	}
	return out, nil
}

const createTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	name text PRIMARY KEY,
	checksum text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// Apply applies the migrations of fsys that the database lacks, in order, and
// returns the names it applied. A failing file rolls back alone (those before
// it stay applied) and stops the run. A recorded file whose text changed, or
// one this binary does not have (a newer binary migrated the database), is an
// error: running against a schema we do not know would corrupt it.
func Apply(ctx context.Context, conn *pgx.Conn, fsys fs.FS) ([]string, error) {
	migrations, err := Load(fsys)
	if err != nil {
		return nil, err
	}
	if err := inLockedTx(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, createTable)
		return err
	}); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	applied, err := recorded(ctx, conn)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, m := range migrations {
		known[m.Name] = true
		if sum, ok := applied[m.Name]; ok && sum != m.Checksum {
			return nil, fmt.Errorf("migration %s was applied with other contents (checksum %.12s, this binary's %.12s): a migration must never change once released; add a new file instead",
				m.Name, sum, m.Checksum)
		}
	}
	for name := range applied {
		if !known[name] {
			return nil, fmt.Errorf("the database has migration %s, which this binary does not know: a newer invisible-dots migrated it; run that version", name)
		}
	}

	var done []string
	for _, m := range migrations {
		if _, ok := applied[m.Name]; ok {
			continue
		}
		ran := false
		err := inLockedTx(ctx, conn, func(tx pgx.Tx) error {
			// Another server may have applied it while we waited for the lock.
			var exists bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE name = $1)", m.Name).Scan(&exists); err != nil {
				return err
			}
			if exists {
				return nil
			}
			// No arguments: pgx sends the file with the simple protocol, which
			// runs a script of several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return describe(m, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (name, checksum) VALUES ($1, $2)", m.Name, m.Checksum); err != nil {
				return err
			}
			ran = true
			return nil
		})
		if err != nil {
			return done, fmt.Errorf("apply migration %s (rolled back; earlier ones stay applied): %w", m.Name, err)
		}
		if ran {
			done = append(done, m.Name)
		}
	}
	return done, nil
}

func recorded(ctx context.Context, conn *pgx.Conn) (map[string]string, error) {
	rows, err := conn.Query(ctx, "SELECT name, checksum FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	out := map[string]string{}
	var name, sum string
	_, err = pgx.ForEachRow(rows, []any{&name, &sum}, func() error {
		out[name] = sum
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	return out, nil
}

func inLockedTx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", LockClass, LockMigrations); err != nil {
			return err
		}
		return fn(tx)
	})
}

// describe adds the line of the failing statement to a PostgreSQL error.
func describe(m Migration, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Position <= 0 {
		return err
	}
	line := 1
	for i, r := range []rune(m.SQL) {
		if int32(i) >= pgErr.Position-1 {
			break
		}
		if r == '\n' {
			line++
		}
	}
	return fmt.Errorf("line %d: %w", line, err)
}
