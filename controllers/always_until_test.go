package controllers

import (
	"testing"
	"time"
)

func TestAlwaysUntil(t *testing.T) {
	zone := time.FixedZone("X", -5*3600)
	from := time.Date(2026, 12, 5, 22, 10, 30, 500, zone)
	for _, tc := range []struct {
		alwaysFor string
		want      time.Time
		ok        bool
	}{
		{"1h", time.Date(2026, 12, 5, 23, 10, 30, 0, zone), true},
		{"endOfDay", time.Date(2026, 12, 6, 0, 0, 0, 0, zone), true},
		{"", time.Time{}, false},
	} {
		got, ok := alwaysUntil(tc.alwaysFor, from)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("alwaysUntil(%q) = %v %v, want %v %v", tc.alwaysFor, got, ok, tc.want, tc.ok)
		}
	}
}
