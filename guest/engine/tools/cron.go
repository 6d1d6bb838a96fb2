package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	// The zones are in the binary: a Dot's guest image need not carry
	// /usr/share/zoneinfo for a job's tz to work.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// CronJob is one of the Dot's own automations (ref 8.8). Exactly one of
// EverySeconds, CronExpr and At is set.
type CronJob struct {
	Name         string
	Message      string
	EverySeconds int64
	CronExpr     string
	// TZ is the IANA zone of CronExpr; "" is UTC.
	TZ string
	At time.Time
	// NextRunAt is the store's, shown by list; zero when the job will not run
	// again.
	NextRunAt time.Time
}

// CronStore keeps the Dot's jobs; the engine's store implements it and its
// cron service runs them. AddJob returns an error wrapping ErrCronJobExists
// for a name in use; RemoveJob one wrapping ErrCronJobNotFound for an
// unknown name.
type CronStore interface {
	AddJob(ctx context.Context, job CronJob) error
	ListJobs(ctx context.Context) ([]CronJob, error)
	RemoveJob(ctx context.Context, name string) error
}

var (
	ErrCronJobExists   = errors.New("an automation of that name exists")
	ErrCronJobNotFound = errors.New("no automation of that name")
)

// CronNamePattern is what a job's name may be: it is used in the firing's id
// (cron:<job>:<time>) and in the opening message, so it stays plain.
var CronNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// MinEverySeconds keeps an automation from waking the computer more than once
// a minute.
const MinEverySeconds = 60

// CronParser is the parser of the jobs' expressions: five fields, with the
// @daily kind of descriptors. The engine's cron service uses the same one, so
// what the tool accepts is what runs.
var CronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ScheduleOf returns the schedule of a cron job's expression in its zone.
func ScheduleOf(job CronJob) (cron.Schedule, error) {
	loc := time.UTC
	if job.TZ != "" {
		l, err := time.LoadLocation(job.TZ)
		if err != nil {
			return nil, fmt.Errorf("time zone %q is not an IANA zone (Europe/Rome, America/New_York)", job.TZ)
		}
		loc = l
	}
	if strings.HasPrefix(strings.TrimSpace(job.CronExpr), "CRON_TZ=") || strings.HasPrefix(strings.TrimSpace(job.CronExpr), "TZ=") {
		return nil, fmt.Errorf("give the time zone in tz, not inside cron_expr")
	}
	s, err := CronParser.Parse(job.CronExpr)
	if err != nil {
		return nil, fmt.Errorf("cron_expr %q does not parse (%v); it needs five fields: minute hour day-of-month month day-of-week", job.CronExpr, err)
	}
	if spec, ok := s.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	return s, nil
}

func (r *Runner) cron(ctx context.Context, a map[string]any) Result {
	if r.env.Cron == nil {
		return fail("Automations are not available: the engine has no place to keep them.")
	}
	switch str(a, "action") {
	case "list":
		return r.cronList(ctx)
	case "remove":
		name := str(a, "name")
		if name == "" {
			return fail("Give the name of the automation to remove (cron with action list shows them).")
		}
		if err := r.env.Cron.RemoveJob(ctx, name); err != nil {
			if errors.Is(err, ErrCronJobNotFound) {
				return fail(fmt.Sprintf("There is no automation named %q; cron with action list shows them.", name))
			}
			return fail(fmt.Sprintf("The automation %q could not be removed: %v.", name, err))
		}
		return ok(fmt.Sprintf("Removed the automation %q.", name))
	default: // add; Validate allows nothing else
		return r.cronAdd(ctx, a)
	}
}

func (r *Runner) cronAdd(ctx context.Context, a map[string]any) Result {
	job := CronJob{
		Name:         str(a, "name"),
		Message:      strings.TrimSpace(str(a, "message")),
		EverySeconds: intArg(a, "every_seconds", 0),
		CronExpr:     strings.TrimSpace(str(a, "cron_expr")),
		TZ:           strings.TrimSpace(str(a, "tz")),
	}
	if !CronNamePattern.MatchString(job.Name) {
		return fail("An automation needs a name of lowercase letters, digits and -, 1 to 40 characters, starting with a letter or digit.")
	}
	if job.Message == "" {
		return fail("An automation needs a message: what you are to be told when it fires.")
	}
	at := strings.TrimSpace(str(a, "at"))
	set := 0
	for _, b := range []bool{job.EverySeconds != 0, job.CronExpr != "", at != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return fail("Give exactly one of every_seconds, cron_expr and at.")
	}
	if job.TZ != "" && job.CronExpr == "" {
		return fail("tz applies to cron_expr only; give at with its offset instead.")
	}
	now := r.env.Now()
	switch {
	case job.EverySeconds != 0:
		if job.EverySeconds < MinEverySeconds {
			return fail(fmt.Sprintf("every_seconds must be at least %d.", MinEverySeconds))
		}
	case job.CronExpr != "":
		if _, err := ScheduleOf(job); err != nil {
			return fail(capitalize(err.Error()) + ".")
		}
	default:
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return fail(fmt.Sprintf("at %q is not an RFC 3339 time such as 2026-12-01T09:00:00+01:00.", at))
		}
		if !t.After(now) {
			return fail(fmt.Sprintf("at %s is in the past (it is now %s).", t.Format(time.RFC3339), now.UTC().Format(time.RFC3339)))
		}
		job.At = t
	}
	if err := r.env.Cron.AddJob(ctx, job); err != nil {
		if errors.Is(err, ErrCronJobExists) {
			return fail(fmt.Sprintf("An automation named %q exists already; remove it first or choose another name.", job.Name))
		}
		return fail(fmt.Sprintf("The automation %q could not be added: %v.", job.Name, err))
	}
	return ok(fmt.Sprintf("Added the automation %q (%s).", job.Name, describeSchedule(job)))
}

func (r *Runner) cronList(ctx context.Context) Result {
	jobs, err := r.env.Cron.ListJobs(ctx)
	if err != nil {
		return fail(fmt.Sprintf("The automations could not be listed: %v.", err))
	}
	if len(jobs) == 0 {
		return ok("There are no automations.")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d automation(s):\n", len(jobs))
	for _, j := range jobs {
		fmt.Fprintf(&b, "- %s: %s", j.Name, describeSchedule(j))
		if !j.NextRunAt.IsZero() {
			fmt.Fprintf(&b, ", next run %s", j.NextRunAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(&b, "; message: %s\n", j.Message)
	}
	return ok(strings.TrimRight(b.String(), "\n"))
}

func describeSchedule(j CronJob) string {
	switch {
	case j.EverySeconds != 0:
		return fmt.Sprintf("every %d s", j.EverySeconds)
	case j.CronExpr != "":
		tz := j.TZ
		if tz == "" {
			tz = "UTC"
		}
		return fmt.Sprintf("cron %q in %s", j.CronExpr, tz)
	default:
		return "once at " + j.At.Format(time.RFC3339)
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
