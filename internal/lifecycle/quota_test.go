package lifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func TestAdmit(t *testing.T) {
	tests := map[string]struct {
		reason   string
		admitted []string
		cap      *int32
		dot      string
		want     Admission
	}{
		"NoCap": {
			reason: "a namespace without a cap admits every Dot and keeps no ledger",
			dot:    "a",
			want:   Admission{Admitted: true},
		},
		"FirstSlot": {
			reason: "under the cap, the Dot takes a slot and the ledger is written",
			cap:    ptr.To[int32](1), dot: "a",
			want: Admission{Admitted: true, Write: true, Ledger: []string{"a"}, Active: 1, Cap: 1},
		},
		"HoldsSlot": {
			reason:   "a Dot in the ledger keeps its slot, even at the cap",
			admitted: []string{"a", "b"}, cap: ptr.To[int32](2), dot: "b",
			want: Admission{Admitted: true, Ledger: []string{"a", "b"}, Active: 2},
		},
		"AtCap": {
			reason:   "at the cap, a new Dot waits",
			admitted: []string{"a"}, cap: ptr.To[int32](1), dot: "b",
			want: Admission{Ledger: []string{"a"}, Active: 1, Cap: 1},
		},
		"OverLoweredCap": {
			reason:   "a lowered cap stops nobody but admits nobody new until under it",
			admitted: []string{"a", "b", "c"}, cap: ptr.To[int32](2), dot: "d",
			want: Admission{Ledger: []string{"a", "b", "c"}, Active: 3, Cap: 2},
		},
		"ZeroCap": {
			reason: "a cap of zero admits nobody",
			cap:    ptr.To[int32](0), dot: "a",
			want: Admission{Cap: 0},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Admit(tc.admitted, tc.cap, tc.dot)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nAdmit(%v, %v, %q) (-want +got):\n%s", tc.reason, tc.admitted, tc.cap, tc.dot, diff)
			}
		})
	}
}

func TestDay(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	tests := map[string]struct {
		reason    string
		now       time.Time
		loc       *time.Location
		wantDay   string
		wantStart time.Time
	}{
		"UTC": {
			reason: "the day begins at midnight UTC by default",
			now:    time.Date(2026, 12, 5, 23, 59, 0, 0, time.UTC), loc: time.UTC,
			wantDay: "2026-12-05", wantStart: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC),
		},
		"ParisAhead": {
			reason: "23:30 UTC is already the next day in Paris",
			now:    time.Date(2026, 12, 5, 23, 30, 0, 0, time.UTC), loc: paris,
			wantDay: "2026-12-06", wantStart: time.Date(2026, 12, 5, 23, 0, 0, 0, time.UTC),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			day, start := Day(tc.now, tc.loc)
			if day != tc.wantDay || !start.Equal(tc.wantStart) {
				t.Errorf("%s\nDay(%v, %v) = %s, %v; want %s, %v", tc.reason, tc.now, tc.loc, day, start, tc.wantDay, tc.wantStart)
			}
		})
	}
}

func TestDecideSpend(t *testing.T) {
	const day = "2026-12-05"
	approve := func(d, extra string) *dotsv1.SpendDecision {
		return &dotsv1.SpendDecision{Day: d, Decision: dotsv1.Approve, ExtraUSD: ptr.To(extra)}
	}
	reject := &dotsv1.SpendDecision{Day: day, Decision: dotsv1.Reject}
	pending := func(msg, suggest, id string) *dotsv1.SpendRequest {
		return &dotsv1.SpendRequest{Day: day, Phase: dotsv1.SpendRequestPending, Message: msg, SuggestedExtraUSD: suggest, RequestID: id}
	}
	tests := map[string]struct {
		reason string
		f      SpendFacts
		want   SpendCap
	}{
		"NoCap": {reason: "no cap is never reached", f: SpendFacts{Spent: 100}, want: SpendCap{Spent: 100}},
		"Under": {reason: "under the cap, nothing is asked", f: SpendFacts{Spent: 4.99, PerDay: ptr.To("5")}, want: SpendCap{Spent: 4.99, Cap: 5}},
		"Reached": {reason: "the cap itself is reached: one request for the namespace",
			f:    SpendFacts{Namespace: "team-a", Day: day, Spent: 5, PerDay: ptr.To("5.00")},
			want: SpendCap{Reached: true, Spent: 5, Cap: 5, Request: pending("spent $5.00 of $5.00 today in namespace team-a; allow $5.00 more?", "5.00", "spend-2026-12-05-5.00")}},
		"Approved": {reason: "an approval for today adds its extra: work flows",
			f: SpendFacts{Namespace: "team-a", Day: day, Spent: 5.5, PerDay: ptr.To("5"), Decision: approve(day, "2")},
			want: SpendCap{Spent: 5.5, Cap: 5, Extra: 2, Request: &dotsv1.SpendRequest{Day: day, Phase: dotsv1.SpendRequestApproved,
				Message: "spent $5.50 of $7.00 today in namespace team-a; allow $5.00 more?", SuggestedExtraUSD: "5.00", RequestID: "spend-2026-12-05-7.00"}}},
		"ApprovedSpent": {reason: "once the extra is spent too, it asks again",
			f:    SpendFacts{Namespace: "team-a", Day: day, Spent: 7, PerDay: ptr.To("5"), Decision: approve(day, "2")},
			want: SpendCap{Reached: true, Spent: 7, Cap: 5, Extra: 2, Request: pending("spent $7.00 of $7.00 today in namespace team-a; allow $5.00 more?", "5.00", "spend-2026-12-05-7.00")}},
		"YesterdaysApproval": {reason: "an answer for another day counts for nothing",
			f:    SpendFacts{Namespace: "team-a", Day: day, Spent: 5, PerDay: ptr.To("5"), Decision: approve("2026-12-04", "100")},
			want: SpendCap{Reached: true, Spent: 5, Cap: 5, Request: pending("spent $5.00 of $5.00 today in namespace team-a; allow $5.00 more?", "5.00", "spend-2026-12-05-5.00")}},
		"Rejected": {reason: "a rejection for today fails the held tasks",
			f: SpendFacts{Namespace: "team-a", Day: day, Spent: 5, PerDay: ptr.To("5"), Decision: reject},
			want: SpendCap{Reached: true, Rejected: true, Spent: 5, Cap: 5, Request: &dotsv1.SpendRequest{Day: day, Phase: dotsv1.SpendRequestRejected,
				Message: "spent $5.00 of $5.00 today in namespace team-a; allow $5.00 more?", SuggestedExtraUSD: "5.00", RequestID: "spend-2026-12-05-5.00"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := DecideSpend(tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nDecideSpend(%+v) (-want +got):\n%s", tc.reason, tc.f, diff)
			}
		})
	}
}

func TestAtRestAndWantsStart(t *testing.T) {
	gate := []dotsv1.ComputerStartGate{{Name: dotsv1.ActiveDotsGate}}
	tests := map[string]struct {
		reason     string
		c          dotsv1.Computer
		rest, want bool
	}{
		"NewUngated": {reason: "a new ungated computer is about to start: active", c: dotsv1.Computer{}, rest: false, want: true},
		"NewGated":   {reason: "a new gated computer holds no slot and wants one", c: dotsv1.Computer{Spec: dotsv1.ComputerSpec{StartGates: gate}}, rest: true, want: true},
		"Running":    {reason: "a running computer is active", c: dotsv1.Computer{Status: dotsv1.ComputerStatus{State: dotsv1.ComputerRunning}}, rest: false, want: false},
		"Asleep": {reason: "an idle-stopped computer is at rest and does not start by itself",
			c: dotsv1.Computer{Status: dotsv1.ComputerStatus{State: dotsv1.ComputerStopped, StopReason: dotsv1.StopIdle}}, rest: true, want: false},
		"Halted": {reason: "a person's stop does not start",
			c: dotsv1.Computer{Spec: dotsv1.ComputerSpec{RunStrategy: dotsv1.RunHalted}, Status: dotsv1.ComputerStatus{State: dotsv1.ComputerStopped, StopReason: dotsv1.StopUser}}, rest: true, want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := AtRest(&tc.c); got != tc.rest {
				t.Errorf("%s\nAtRest = %v, want %v", tc.reason, got, tc.rest)
			}
			if got := WantsStart(&tc.c); got != tc.want {
				t.Errorf("%s\nWantsStart = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}
