package daemon

import (
	"encoding/json"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// A task that reaches limits.max_cost_per_task_usd parks with a budget
// approval instead of failing (the spend is checked before every request,
// so the request that crosses the cap is delivered). Approved, it goes on
// with the cap grown by the config's cap; rejected, it fails as at the cap.
func TestBudgetApproval(t *testing.T) {
	start := func(t *testing.T) (*harness, *streamReader) {
		or := newFakeOpenRouter(t)
		or.cost = 0.6
		h := startEngine(t, t.TempDir(), or, &fakeTools{})
		s := openStream(t, h.c, 0, false)
		cfg := testConfig(nil)
		cfg.Limits = protocol.Limits{MaxStepsPerTask: 10, MaxCostPerTaskUSD: 1}
		h.configure(cfg)
		h.send("t1", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "x", Description: "STEPS"})
		return h, s
	}
	budget := func(t *testing.T, s *streamReader, n int, wantReason string, wantArgs string) protocol.ApprovalRequested {
		t.Helper()
		evs := s.waitFor(t, "a budget approval", func(evs []protocol.OutboundEvent) bool {
			return countType(evs, protocol.EventApprovalRequested) == n
		})
		ar := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[n-1])
		if ar.Permission != protocol.BudgetPermission || ar.Tool != "limits.max_cost_per_task_usd" || ar.Reason != wantReason ||
			string(ar.Arguments) != wantArgs || ar.TaskID == nil || *ar.TaskID != "x" {
			t.Fatalf("approval.requested = %+v %s", ar, ar.Arguments)
		}
		if n := countType(evs, protocol.EventTaskFailed); n != 0 {
			t.Fatalf("the task failed at the cap: %s", describe(evs))
		}
		return ar
	}
	first := "The task spent $1.2000 of $1.00 (limits.max_cost_per_task_usd); allow $1.00 more?"
	firstArgs := `{"spent_usd":1.2,"cap_usd":1,"more_usd":1}`

	t.Run("rejected", func(t *testing.T) {
		h, s := start(t)
		ar := budget(t, s, 1, first, firstArgs)
		h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalReject})
		evs := s.waitFor(t, "task.failed", hasType(protocol.EventTaskFailed))
		got := decode[protocol.TaskFailed](t, ofType(evs, protocol.EventTaskFailed)[0])
		if want := "stopped: the task reached limits.max_cost_per_task_usd (spent 1.2000 USD of 1.00) and the person did not allow more"; got.Error != want {
			t.Errorf("task.failed = %q, want %q", got.Error, want)
		}
		if n := len(h.or.Requests()); n != 2 {
			t.Errorf("%d requests, want 2: nothing more after the rejection", n)
		}
	})
	t.Run("approved, then rejected", func(t *testing.T) {
		h, s := start(t)
		ar := budget(t, s, 1, first, firstArgs)
		h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalApprove})
		// The task goes on to the new cap, 2.00, and asks again.
		ar = budget(t, s, 2, "The task spent $2.4000 of $2.00 (limits.max_cost_per_task_usd); allow $1.00 more?", `{"spent_usd":2.4,"cap_usd":2,"more_usd":1}`)
		if n := len(h.or.Requests()); n != 4 {
			t.Errorf("%d requests, want 4: two more after the approval", n)
		}
		h.send("a2", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalReject})
		evs := s.waitFor(t, "task.failed", hasType(protocol.EventTaskFailed))
		got := decode[protocol.TaskFailed](t, ofType(evs, protocol.EventTaskFailed)[0])
		if got.Error != "stopped: the task reached limits.max_cost_per_task_usd (spent 2.4000 USD of 2.00) and the person did not allow more" {
			t.Errorf("task.failed = %q", got.Error)
		}
		var spent float64
		if got.SpentUSD != nil {
			spent = *got.SpentUSD
		}
		if spent != 2.4 {
			raw, _ := json.Marshal(got)
			t.Errorf("task.failed = %s, want spent 2.4", raw)
		}
	})
}
