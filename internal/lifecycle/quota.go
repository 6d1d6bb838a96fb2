package lifecycle

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Admission is the active-Dots decision for one Dot that is to start.
type Admission struct {
	// Admitted: the Dot holds a slot (it did, or takes one now).
	Admitted bool
	// Ledger is the quota's status.admitted after the decision; Write says
	// whether it changed (a slot was taken).
	Ledger []string
	Write  bool
	// Active and Cap are what the message to a person says.
	Active, Cap int
}

// Admit decides whether the Dot dot may take an active slot of a namespace
// whose ledger (the DotQuota's status.admitted) is admitted and cap is
// activeDots (nil: no cap). A Dot already in the ledger keeps its slot; a
// new one is added only while the ledger is under the cap (a ledger over a
// lowered cap admits nobody new until it is under).
func Admit(admitted []string, activeDots *int32, dot string) Admission {
	a := Admission{Ledger: admitted, Active: len(admitted)}
	if activeDots == nil || slices.Contains(admitted, dot) {
		a.Admitted = true
		return a
	}
	a.Cap = int(*activeDots)
	if len(admitted) >= a.Cap {
		return a
	}
	a.Admitted, a.Write = true, true
	a.Ledger = append(slices.Clone(admitted), dot)
	slices.Sort(a.Ledger)
	a.Active = len(a.Ledger)
	return a
}

// WaitMessage is what a Dot beyond the cap says, with how to change it.
func WaitMessage(a Admission, namespace string) string {
	return fmt.Sprintf("%d of %d active Dots in namespace %s (DotQuota %s): stop another Dot or raise spec.activeDots with 'invisible-dots quota set --active-dots N -n %s' (or kubectl edit dotquota %s -n %s)",
		a.Active, a.Cap, namespace, dotsv1.DotQuotaName, namespace, dotsv1.DotQuotaName, namespace)
}

// AtRest reports whether a Computer holds no active slot: its VM is
// stopped (or was never started) and nothing asks it to start.
func AtRest(c *dotsv1.Computer) bool {
	switch c.Status.State {
	case dotsv1.ComputerStopped:
	case "", dotsv1.ComputerProvisioning:
		// Never started: it holds no slot while a gate holds it.
		if len(c.Spec.StartGates) == 0 {
			return false
		}
	default:
		return false
	}
	return !c.RequestPending(dotsv1.StartRequestedAnnotation, c.Status.HandledStartRequest) &&
		!c.RequestPending(dotsv1.RebootRequestedAnnotation, c.Status.HandledRebootRequest)
}

// WantsStart reports whether the host agent would start the Computer were
// it not gated: the run strategy's own starts (a new computer, Always, a
// person's start) beside the wake decision's.
func WantsStart(c *dotsv1.Computer) bool {
	if c.Spec.RunStrategy == dotsv1.RunHalted {
		return false
	}
	switch c.Status.State {
	case "", dotsv1.ComputerProvisioning, dotsv1.ComputerStopped:
	default:
		return false
	}
	return c.Spec.RunStrategy == dotsv1.RunAlways ||
		c.RequestPending(dotsv1.StartRequestedAnnotation, c.Status.HandledStartRequest) ||
		c.RequestPending(dotsv1.RebootRequestedAnnotation, c.Status.HandledRebootRequest) ||
		c.Status.StopReason == "" || c.Status.StopReason == dotsv1.StopUser
}

// Day is the day now falls in, where the day begins in loc: its name
// (YYYY-MM-DD) and its start.
func Day(now time.Time, loc *time.Location) (string, time.Time) {
	t := now.In(loc)
	start := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
	return start.Format(time.DateOnly), start
}

// SpendFacts are what the daily spend decision reads of a namespace.
type SpendFacts struct {
	Namespace string
	// Day is today's name (Day); Spent what the namespace spent since it
	// began, in US dollars.
	Day   string
	Spent float64
	// PerDay is spec.spendPerDayUSD (nil: no cap); Decision the person's
	// spec.spendDecision (it counts for its own day only).
	PerDay   *string
	Decision *dotsv1.SpendDecision
}

// SpendCap is the namespace's daily spend decision.
type SpendCap struct {
	// Reached: the day's spend is at or over the cap and what a person
	// allowed more: no new task or message is delivered.
	Reached bool
	// Rejected: a person refused more for the day: the held tasks fail.
	Rejected bool
	// Spent, Cap and Extra (allowed today beyond the cap) in US dollars.
	Spent, Cap, Extra float64
	// Request is the day's request for more (nil while under the cap and
	// nobody answered).
	Request *dotsv1.SpendRequest
}

// DecideSpend is the daily spend decision: the cap plus what a person
// allowed more today, against what the namespace spent today.
func DecideSpend(f SpendFacts) (SpendCap, error) {
	s := SpendCap{Spent: f.Spent}
	if f.PerDay == nil {
		return s, nil
	}
	limit, err := strconv.ParseFloat(*f.PerDay, 64)
	if err != nil {
		return s, fmt.Errorf("spendPerDayUSD %q: %w", *f.PerDay, err)
	}
	s.Cap = limit
	today := f.Decision != nil && f.Decision.Day == f.Day
	if today && f.Decision.Decision == dotsv1.Approve && f.Decision.ExtraUSD != nil {
		if s.Extra, err = strconv.ParseFloat(*f.Decision.ExtraUSD, 64); err != nil {
			return s, fmt.Errorf("spendDecision.extraUSD %q: %w", *f.Decision.ExtraUSD, err)
		}
	}
	s.Reached = f.Spent >= s.Cap+s.Extra
	suggest := max(s.Cap, 1)
	ask := &dotsv1.SpendRequest{Day: f.Day, Phase: dotsv1.SpendRequestPending,
		Message:           fmt.Sprintf("spent $%.2f of $%.2f today in namespace %s; allow $%.2f more?", f.Spent, s.Cap+s.Extra, f.Namespace, suggest),
		SuggestedExtraUSD: strconv.FormatFloat(suggest, 'f', 2, 64),
		RequestID:         spendRequestID(f.Day, s.Cap+s.Extra)}
	switch {
	case today && f.Decision.Decision == dotsv1.Reject:
		ask.Phase = dotsv1.SpendRequestRejected
		s.Rejected = s.Reached
		s.Request = ask
	case s.Reached:
		// Asked again when what was allowed more is spent too.
		s.Request = ask
	case today:
		ask.Phase = dotsv1.SpendRequestApproved
		s.Request = ask
	}
	return s, nil
}

// AnswerSpend is the answer to the quota's pending request for more
// spend: approve adds extra (the request's suggestion when empty) to what
// was allowed today already.
func AnswerSpend(q *dotsv1.DotQuota, decision dotsv1.ApprovalDecision, extra string) (*dotsv1.SpendDecision, error) {
	req := q.Status.SpendRequest
	if req == nil || req.Phase != dotsv1.SpendRequestPending {
		return nil, fmt.Errorf("namespace %s asks for no more spend now (spent $%s today)", q.Namespace, cmp.Or(q.Status.SpentTodayUSD, "0.00"))
	}
	d := &dotsv1.SpendDecision{Day: req.Day, Decision: decision}
	if decision != dotsv1.Approve {
		return d, nil
	}
	more, err := strconv.ParseFloat(cmp.Or(extra, req.SuggestedExtraUSD), 64)
	if err != nil || more <= 0 {
		return nil, fmt.Errorf("--extra %q: US dollars more, e.g. 5 or 2.50", extra)
	}
	if prev := q.Spec.SpendDecision; prev != nil && prev.Day == req.Day && prev.Decision == dotsv1.Approve && prev.ExtraUSD != nil {
		if had, err := strconv.ParseFloat(*prev.ExtraUSD, 64); err == nil {
			more += had
		}
	}
	d.ExtraUSD = ptr.To(strconv.FormatFloat(more, 'f', 2, 64))
	return d, nil
}

// SpendAnswered reports whether the quota's spec answers the question
// requestID already: its decision for that day refuses, or allows more
// than was allowed when the question was asked. An answer written twice
// (a retry after a crash) is then not added twice.
func SpendAnswered(spec dotsv1.DotQuotaSpec, requestID string) bool {
	day, allowed, ok := parseSpendRequestID(requestID)
	d := spec.SpendDecision
	if !ok || d == nil || d.Day != day {
		return false
	}
	if d.Decision == dotsv1.Reject {
		return true
	}
	var perDay, extra float64
	if spec.SpendPerDayUSD != nil {
		perDay, _ = strconv.ParseFloat(*spec.SpendPerDayUSD, 64)
	}
	if d.ExtraUSD != nil {
		extra, _ = strconv.ParseFloat(*d.ExtraUSD, 64)
	}
	return perDay+extra > allowed+0.005
}

// spendRequestID names a day's question for more spend by the day and
// what was allowed when it was asked (SpendRequest.requestID).
func spendRequestID(day string, allowed float64) string {
	return fmt.Sprintf("spend-%s-%.2f", day, allowed)
}

func parseSpendRequestID(id string) (day string, allowed float64, ok bool) {
	rest, found := strings.CutPrefix(id, "spend-")
	i := strings.LastIndexByte(rest, '-')
	if !found || i < 0 {
		return "", 0, false
	}
	allowed, err := strconv.ParseFloat(rest[i+1:], 64)
	return rest[:i], allowed, err == nil
}

// SpendRejectedError is the error of a task held by the spend cap once a
// person refused more for the day.
func SpendRejectedError(namespace string, s SpendCap) string {
	return fmt.Sprintf("the daily spend cap of namespace %s ($%.2f, spent $%.2f) was reached and the request for more was rejected", namespace, s.Cap+s.Extra, s.Spent)
}

// NewWork reports whether an outbox row of type typ is new work for a
// Dot (a person's message, a task), which the namespace's daily spend cap
// holds; answers to approvals and cancels of running work are not.
func NewWork(typ string) bool {
	return typ == protocol.InboundUserMessage || typ == protocol.InboundTaskCreated
}

// Deliverable is how many of the outbox's rows (their types, in order) go
// while the spend cap holds: those before the first new work, so nothing
// overtakes what is held.
func Deliverable(types []string) int {
	for i, t := range types {
		if NewWork(t) {
			return i
		}
	}
	return len(types)
}
