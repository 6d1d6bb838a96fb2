package store

import (
	"context"
	"fmt"
	"time"
)

// SpentUSD sums the spent_usd of the Dot's guest events of the types given
// (those that end a unit of spend), stored at or after since (all when
// since is zero). An event without a numeric spent_usd adds nothing. The
// sum is taken in numeric, so many small amounts add up exactly.
func (s *Store) SpentUSD(ctx context.Context, dotUID string, types []string, since time.Time) (float64, error) {
	var spent float64
	err := s.pool.QueryRow(ctx, `
SELECT COALESCE(sum((data->>'spent_usd')::numeric), 0)::float8
FROM events
WHERE dot_uid = $1 AND source = 'guest' AND type = ANY($2)
  AND ($3::timestamptz IS NULL OR created_at >= $3::timestamptz)
  AND jsonb_typeof(data->'spent_usd') = 'number'`, dotUID, types, nullTime(since)).Scan(&spent)
	if err != nil {
		return 0, fmt.Errorf("sum the spend of dot %s: %w", dotUID, err)
	}
	return spent, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
