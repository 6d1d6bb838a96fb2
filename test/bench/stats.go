package bench

import (
	"slices"
	"time"
)

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of ds, or 0
// for none. ds is not modified.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	// Nearest rank: the smallest value with at least p% of the sample at or
	// below it.
	rank := int(float64(len(s))*p/100 + 0.999999999)
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// ms is d in milliseconds, the unit every latency is reported in.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// mib is n bytes in MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
