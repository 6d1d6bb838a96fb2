package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCron(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	fc := &fakeCron{}
	r := NewRunner(Env{Cron: fc, Now: func() time.Time { return now }})
	run := func(args map[string]any) Result {
		raw, _ := json.Marshal(args)
		return r.Run(context.Background(), "cron", raw)
	}
	steps := []struct {
		args   map[string]any
		wantOK bool
		want   string
	}{
		{map[string]any{"action": "list"}, true, "There are no automations."},
		{map[string]any{"action": "add", "name": "standup", "message": "Post the standup", "cron_expr": "0 9 * * 1-5", "tz": "Europe/Rome"}, true,
			`Added the automation "standup" (cron "0 9 * * 1-5" in Europe/Rome).`},
		{map[string]any{"action": "add", "name": "poll", "message": "Check the feed", "every_seconds": 3600}, true, `Added the automation "poll" (every 3600 s).`},
		{map[string]any{"action": "add", "name": "once", "message": "Renew", "at": "2026-12-01T09:00:00+01:00"}, true, `Added the automation "once" (once at 2026-12-01T09:00:00+01:00).`},
		{map[string]any{"action": "add", "name": "poll", "message": "again", "every_seconds": 600}, false,
			`An automation named "poll" exists already; remove it first or choose another name.`},
		{map[string]any{"action": "add", "name": "Bad Name", "message": "x", "every_seconds": 600}, false,
			"An automation needs a name of lowercase letters, digits and -, 1 to 40 characters, starting with a letter or digit."},
		{map[string]any{"action": "add", "name": "x", "every_seconds": 600}, false, "An automation needs a message: what you are to be told when it fires."},
		{map[string]any{"action": "add", "name": "x", "message": "m", "every_seconds": 600, "cron_expr": "* * * * *"}, false, "Give exactly one of every_seconds, cron_expr and at."},
		{map[string]any{"action": "add", "name": "x", "message": "m"}, false, "Give exactly one of every_seconds, cron_expr and at."},
		{map[string]any{"action": "add", "name": "x", "message": "m", "every_seconds": 60, "tz": "UTC"}, false, "tz applies to cron_expr only; give at with its offset instead."},
		{map[string]any{"action": "add", "name": "x", "message": "m", "cron_expr": "61 * * * *"}, false, ""},
		{map[string]any{"action": "add", "name": "x", "message": "m", "cron_expr": "0 9 * * *", "tz": "Mars/Olympus"}, false,
			`Time zone "Mars/Olympus" is not an IANA zone (Europe/Rome, America/New_York).`},
		{map[string]any{"action": "add", "name": "x", "message": "m", "cron_expr": "CRON_TZ=UTC 0 9 * * *"}, false, "Give the time zone in tz, not inside cron_expr."},
		{map[string]any{"action": "add", "name": "x", "message": "m", "at": "2026-11-30T11:00:00Z"}, false,
			"at 2026-11-30T11:00:00Z is in the past (it is now 2026-11-30T12:00:00Z)."},
		{map[string]any{"action": "add", "name": "x", "message": "m", "at": "tomorrow"}, false,
			`at "tomorrow" is not an RFC 3339 time such as 2026-12-01T09:00:00+01:00.`},
		{map[string]any{"action": "remove", "name": "nope"}, false, `There is no automation named "nope"; cron with action list shows them.`},
		{map[string]any{"action": "remove"}, false, "Give the name of the automation to remove (cron with action list shows them)."},
		{map[string]any{"action": "remove", "name": "poll"}, true, `Removed the automation "poll".`},
		{map[string]any{"action": "list"}, true, "2 automation(s):\n- standup: cron \"0 9 * * 1-5\" in Europe/Rome; message: Post the standup\n- once: once at 2026-12-01T09:00:00+01:00; message: Renew"},
	}
	for i, s := range steps {
		res := run(s.args)
		if res.OK != s.wantOK {
			t.Errorf("step %d cron %v ok = %v (%q)", i, s.args, res.OK, res.Text)
		}
		if s.want != "" && res.Text != s.want {
			t.Errorf("step %d cron %v:\n got %q\nwant %q", i, s.args, res.Text, s.want)
		}
		if s.want == "" && !strings.Contains(res.Text, "does not parse") {
			t.Errorf("step %d cron %v: %q does not say the expression does not parse", i, s.args, res.Text)
		}
	}
	jobs, _ := fc.ListJobs(context.Background())
	want := []CronJob{
		{Name: "standup", Message: "Post the standup", CronExpr: "0 9 * * 1-5", TZ: "Europe/Rome"},
		{Name: "once", Message: "Renew", At: time.Date(2026, 12, 1, 9, 0, 0, 0, time.FixedZone("", 3600))},
	}
	if d := cmp.Diff(want, jobs, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); d != "" {
		t.Errorf("stored jobs (-want +got):\n%s", d)
	}
}

func TestScheduleOfUsesTheZone(t *testing.T) {
	s, err := ScheduleOf(CronJob{CronExpr: "0 9 * * *", TZ: "America/New_York"})
	if err != nil {
		t.Fatal(err)
	}
	next := s.Next(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC); !next.Equal(want) {
		t.Errorf("next run of 9:00 New York after 12:00 UTC = %s, want %s", next.UTC(), want)
	}
}

func TestCronWithoutStore(t *testing.T) {
	r := NewRunner(Env{})
	res := r.Run(context.Background(), "cron", json.RawMessage(`{"action":"list"}`))
	if res.OK || !strings.HasPrefix(res.Text, "Automations are not available") {
		t.Errorf("cron without a store: %+v", res)
	}
}

// A store failure is said in a sentence, not swallowed.
type brokenCron struct{ fakeCron }

func (*brokenCron) ListJobs(context.Context) ([]CronJob, error) { return nil, errFakeStore }

func TestCronStoreFailure(t *testing.T) {
	r := NewRunner(Env{Cron: &brokenCron{}})
	res := r.Run(context.Background(), "cron", json.RawMessage(`{"action":"list"}`))
	if res.OK || res.Text != "The automations could not be listed: the store is closed." {
		t.Errorf("cron list on a broken store: %+v", res)
	}
}
