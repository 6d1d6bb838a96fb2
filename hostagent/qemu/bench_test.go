package qemu

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkStartStopTestImage boots the test image under tcg (say so when
// quoting it: KVM is much faster) and reports:
//   - start-to-health-s: Start() until GET /v1/health answers through the
//     proven channel, asked every 100 ms;
//   - stop-s: the stop as the reconciler composes it (stopVM: poweroff, QEMU
//     exits by itself, Kill clears its record);
//   - idle-rss-MiB: QEMU's resident memory with the guest idle.
//
// Run: go test -run '^$' -bench StartStopTestImage -benchtime 3x ./hostagent/qemu/
func BenchmarkStartStopTestImage(b *testing.B) {
	ctx := context.Background()
	d, spec := imageDriver(b)
	cleanupVM(b, d, spec.ID)
	var startTotal, stopTotal time.Duration
	var rssTotal float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		obs, err := d.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := waitHealthy(ctx, d, spec, 120*time.Second); err != nil {
			b.Fatal(err)
		}
		startTotal += time.Since(t0)
		b.StopTimer()
		time.Sleep(3 * time.Second) // let the guest settle to idle
		rssTotal += rssMiB(b, obs.PID)
		b.StartTimer()
		t1 := time.Now()
		res, err := stopVM(ctx, d, spec.ID, spec.Token, imageGrace)
		if err != nil {
			b.Fatal(err)
		}
		if !res.PoweredOff {
			b.Logf("iteration %d: the guest did not power itself off (%+v)", i, res)
		}
		stopTotal += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(startTotal.Seconds()/n, "start-to-health-s")
	b.ReportMetric(stopTotal.Seconds()/n, "stop-s")
	b.ReportMetric(rssTotal/n, "idle-rss-MiB")
}

// BenchmarkStartBlank measures the host side of a start alone (tcg, no
// guest): Start, which provisions the overlay on the first start, writes the
// seed, spawns QEMU, writes its record, and returns without waiting for QEMU.
// Untimed: QEMU's resident memory once it listens on the guest port, and a
// kill.
//
// Run: go test -run '^$' -bench StartBlank -benchtime 5x ./hostagent/qemu/
func BenchmarkStartBlank(b *testing.B) {
	ctx := context.Background()
	d := realDriver(b)
	spec := blankSpec(testID)
	cleanupVM(b, d, spec.ID)
	var rssTotal float64
	for i := 0; i < b.N; i++ {
		obs, err := d.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		waitListening(b, obs.GuestPort)
		rssTotal += rssMiB(b, obs.PID)
		// No token: no poweroff is asked, QEMU is killed at once.
		if _, err := stopVM(ctx, d, spec.ID, "", blankGrace); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(rssTotal/float64(b.N), "rss-MiB")
}

// rssMiB reads VmRSS of a process.
func rssMiB(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	b.Fatalf("no VmRSS for pid %d", pid)
	return 0
}
