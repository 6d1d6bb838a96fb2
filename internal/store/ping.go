package store

import "context"

// Ping says whether the database answers, for the server's health.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }
