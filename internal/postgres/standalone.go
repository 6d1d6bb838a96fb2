package postgres

import (
	"context"

	"github.com/go-logr/logr"
)

// Standalone is a managed PostgreSQL server on its own: the database is
// created, but nothing is migrated and no control-plane lock is taken. It is
// a database for another control plane to use through DATABASE_URL (the e2e
// tests' "second PostgreSQL", a benchmark's external database).
type Standalone struct {
	m *managed
}

// StartStandalone starts a managed server in home (db/ and run/ under it).
func StartStandalone(ctx context.Context, home string, log logr.Logger) (*Standalone, error) {
	m, err := startManaged(ctx, home, log)
	if err != nil {
		return nil, err
	}
	return &Standalone{m: m}, nil
}

// DSN is a postgres:// URL of the server's database over its unix socket.
func (s *Standalone) DSN() string { return s.m.dsn(databaseName) }

// Stop stops the server.
func (s *Standalone) Stop(ctx context.Context) error { return s.m.stop(ctx) }
