package postgres

import (
	"context"
	"os"
	"testing"
)

// BenchmarkColdStart is a first start on a fresh home: initdb, postgres,
// migrations, the control-plane lock.
func BenchmarkColdStart(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		home, err := os.MkdirTemp("", "pgbench-")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		inst, err := Start(ctx, Options{Home: home})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := inst.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		_ = os.RemoveAll(home)
		b.StartTimer()
	}
}

// BenchmarkWarmStart is a start on an existing home, to a database ready for
// kine; BenchmarkWarmStop is the clean stop after it.
func BenchmarkWarmStart(b *testing.B) { benchWarm(b, false) }
func BenchmarkWarmStop(b *testing.B)  { benchWarm(b, true) }

func benchWarm(b *testing.B, timeStop bool) {
	ctx := context.Background()
	home := b.TempDir()
	inst, err := Start(ctx, Options{Home: home})
	if err != nil {
		b.Fatal(err)
	}
	if err := inst.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if timeStop {
			b.StopTimer()
		}
		inst, err := Start(ctx, Options{Home: home})
		if err != nil {
			b.Fatal(err)
		}
		if timeStop {
			b.StartTimer()
		} else {
			b.StopTimer()
		}
		if err := inst.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		if !timeStop {
			b.StartTimer()
		}
	}
}
