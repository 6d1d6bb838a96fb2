package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestParseAndTableSayWhatIsMetMissedAndNotRun(t *testing.T) {
	const out = `goos: linux
BenchmarkControlPlane/start/cold-2         	       1	      1500 api-ready-ms	      2100 dots-ready-ms
BenchmarkControlPlane/start/warm-2         	       1	      1200 api-ready-ms
BenchmarkOutboxLive-2   	  200000	      5000 ns/op	     25000 events/s
--- some other line 12 p99-ms
--- FAIL: BenchmarkControlPlane/watch
FAIL	github.com/invisible-dots/invisible-dots/test/bench	813.540s
PASS`
	figures, failed, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"BenchmarkControlPlane/watch", "github.com/invisible-dots/invisible-dots/test/bench"}; strings.Join(failed, ",") != strings.Join(want, ",") {
		t.Errorf("failed = %q; want %q", failed, want)
	}
	if got := figures["ControlPlane/start/cold"]["dots-ready-ms"]; got != 2100 {
		t.Errorf("cold dots-ready-ms = %v, want 2100", got)
	}
	if got := figures["OutboxLive"]["events/s"]; got != 25000 {
		t.Errorf("OutboxLive events/s = %v, want 25000", got)
	}
	var sb strings.Builder
	met, missed, notRun := table(&sb, figures)
	// cold 1500 ≤ 2000 and outbox 25000 ≥ 20000 are met; warm 1200 > 1000
	// is not; the rest did not run.
	if met != 2 || missed != 1 || notRun != len(goals)-3 {
		t.Errorf("met, missed, not run = %d, %d, %d; want 2, 1, %d\n%s", met, missed, notRun, len(goals)-3, sb.String())
	}
	for _, want := range []string{
		`warm start to /readyz \(ms\)\s+1200\s+≤ 1000\s+NO`,
		`engine outbox, live, 64 writers \(events/s\)\s+25000\s+≥ 20000\s+yes`,
		`idle server PSS \(MiB\)\s+not run\s+≤ 120\s+—`,
	} {
		if !regexp.MustCompile(want).MatchString(sb.String()) {
			t.Errorf("the table has no row matching %s:\n%s", want, sb.String())
		}
	}
}

// The webhook bench's line as go test prints it (its own lines come first:
// they are written while it runs) gives the row of its p99.
func TestWebhookAcceptRow(t *testing.T) {
	const out = `
webhook accept (signed delivery to 202, one Task made), 2000 deliveries at 100/s over 10 Webhooks (88.0/s from the first send to the last answer):
  p50 40.2 ms, p99 85.5 ms, max 120.1 ms
goos: linux
BenchmarkWebhookAccept-2   	       1	22976812616 ns/op	        87.97 answered/s	       40.2 p50-ms	      85.5 p99-ms
PASS`
	figures, failed, err := parse(strings.NewReader(out))
	if err != nil || len(failed) > 0 {
		t.Fatalf("parse: %v, failed %q", err, failed)
	}
	var sb strings.Builder
	if met, missed, _ := table(&sb, figures); met != 1 || missed != 0 {
		t.Errorf("met, missed = %d, %d; want 1, 0\n%s", met, missed, sb.String())
	}
	if want := `webhook accept, signed delivery to 202 at 100/s, p99 \(ms\)\s+85.5\s+≤ 100\s+yes`; !regexp.MustCompile(want).MatchString(sb.String()) {
		t.Errorf("the table has no row matching %s:\n%s", want, sb.String())
	}
}
