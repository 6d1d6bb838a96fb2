package projection

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// recorded is a Dot's log as the control plane stores it: a task given to
// the Dot, an approval asked and granted, progress, an automation, and the
// end of the task; then a second task cancelled, and a third the deliverer
// gave up.
func recorded() []Event {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var out []Event
	add := func(host bool, typ, data string) {
		out = append(out, Event{ID: int64(len(out) + 1), Type: typ, Host: host, Data: json.RawMessage(data), At: t0.Add(time.Duration(len(out)) * time.Second)})
	}
	add(true, wire.EventTaskCreated, `{"task_id":"t1","run":1}`)
	add(false, protocol.EventAgentState, `{"state":"THINKING"}`)
	add(false, protocol.EventTaskStarted, `{"task_id":"t1"}`)
	add(false, protocol.EventTaskProgress, `{"task_id":"t1","text":"running the tests","spent_usd":0.01}`)
	add(false, protocol.EventApprovalRequested, `{"approval_id":"a1","task_id":"t1","tool":"exec","permission":"computer.exec","arguments":{},"reason":"run make"}`)
	add(true, wire.EventApprovalResolved, `{"approval_id":"a1","decision":"approve"}`)
	add(false, protocol.EventAutomationNextRun, `{"next_run_at_ms":1764586800000}`)
	add(false, protocol.EventTaskCompleted, `{"task_id":"t1","summary":"all green","spent_usd":0.042}`)
	add(false, protocol.EventAgentState, `{"state":"IDLE"}`)
	add(true, wire.EventTaskCreated, `{"task_id":"t2","run":1}`)
	add(true, wire.EventTaskCancelled, `{"task_id":"t2"}`)
	add(false, protocol.EventTaskCompleted, `{"task_id":"t2","summary":"too late"}`)
	add(true, wire.EventTaskFailed, `{"task_id":"t3","error":"the guest refused the task"}`)
	// A fourth task whose first run was cut short by its computer
	// stopping: given to the Dot again, it completes in its second run.
	add(true, wire.EventTaskCreated, `{"task_id":"t4","run":1}`)
	add(false, protocol.EventTaskStarted, `{"task_id":"t4"}`)
	add(true, wire.EventTaskCreated, `{"task_id":"t4","run":2}`)
	add(false, protocol.EventTaskStarted, `{"task_id":"t4"}`)
	add(false, protocol.EventTaskCompleted, `{"task_id":"t4","summary":"done"}`)
	return out
}

func TestProjectionFromARecordedLog(t *testing.T) {
	log := recorded()
	v := NewView()
	v.Fold(log...)
	at := func(i int) time.Time { return log[i].At }
	want := map[string]*TaskView{
		"t1": {Phase: dotsv1.TaskCompleted, Runs: 1, Summary: "all green", Progress: "running the tests", SpentUSD: 0.042,
			RunTimes: []RunTimes{{Number: 1, Started: at(0), Delivered: at(2), Finished: at(7), Outcome: "COMPLETED"}}, Ended: at(7)},
		"t2": {Phase: dotsv1.TaskCancelled, Runs: 1,
			RunTimes: []RunTimes{{Number: 1, Started: at(9), Finished: at(10), Outcome: "CANCELLED"}}, Ended: at(10)},
		// Given up before any run: it ended, with no run.
		"t3": {Phase: dotsv1.TaskFailed, Error: "the guest refused the task", Ended: at(12)},
		"t4": {Phase: dotsv1.TaskCompleted, Runs: 2, Summary: "done", Ended: at(17), RunTimes: []RunTimes{
			{Number: 1, Started: at(13), Delivered: at(14), Finished: at(15), Outcome: RunInterrupted},
			{Number: 2, Started: at(15), Delivered: at(16), Finished: at(17), Outcome: "COMPLETED"},
		}},
	}
	if diff := cmp.Diff(want, v.Tasks); diff != "" {
		t.Errorf("tasks -want +got:\n%s", diff)
	}
	if v.AgentState != protocol.StateIdle || v.CurrentTask() != "" || v.PendingApprovals() != 0 {
		t.Errorf("agent %s, current task %q, pending %d; want IDLE, none, 0", v.AgentState, v.CurrentTask(), v.PendingApprovals())
	}
	if v.NextAutomation == nil || v.NextAutomation.UnixMilli() != 1764586800000 {
		t.Errorf("next automation %v", v.NextAutomation)
	}
	if !v.LastActivity.Equal(log[len(log)-1].At) {
		t.Errorf("last activity %v; want the last event's time", v.LastActivity)
	}

	// Folded in pieces, or with events seen again, the view is the same.
	pieces := NewView()
	pieces.Fold(log[:5]...)
	if pieces.Tasks["t1"].Phase != dotsv1.TaskWaitingApproval || pieces.CurrentTask() != "t1" || pieces.PendingApprovals() != 1 {
		t.Errorf("mid-log: t1 %s, current %q, pending %d; want WAITING_APPROVAL, t1, 1", pieces.Tasks["t1"].Phase, pieces.CurrentTask(), pieces.PendingApprovals())
	}
	pieces.Fold(log[3:]...)
	if diff := cmp.Diff(v, pieces); diff != "" {
		t.Errorf("folded in pieces with a repeat -whole +pieces:\n%s", diff)
	}
}

// The Dot's last work is its newest event but a change made to it, its
// computer or its channels: a spec patch or a start after its work moves
// the idle clock (LastActivity), not lastActivityTime (LastWork).
func TestLastWorkIsNotAChangeMadeToTheDot(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	v := NewView()
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	v.Fold(Event{ID: 1, Host: true, Type: wire.EventDotCreated, Data: json.RawMessage(`{"generation":1}`), At: at(0)},
		Event{ID: 2, Host: true, Type: wire.EventComputerState, Data: json.RawMessage(`{"state":"RUNNING"}`), At: at(1)})
	if !v.LastWork.IsZero() || !v.LastActivity.Equal(at(1)) {
		t.Errorf("after the create and the start: last work %v, last activity %v; want none, %v", v.LastWork, v.LastActivity, at(1))
	}
	v.Fold(Event{ID: 3, Host: true, Type: wire.EventMessageUser, Data: json.RawMessage(`{"text":"hi"}`), At: at(2)},
		Event{ID: 4, Host: false, Type: protocol.EventAgentState, Data: json.RawMessage(`{"state":"IDLE"}`), At: at(3)},
		Event{ID: 5, Host: true, Type: wire.EventDotUpdated, Data: json.RawMessage(`{"generation":2}`), At: at(4)},
		Event{ID: 6, Host: true, Type: wire.EventChannelStatus, Data: json.RawMessage(`{}`), At: at(5)})
	if !v.LastWork.Equal(at(3)) || !v.LastActivity.Equal(at(5)) {
		t.Errorf("last work %v, last activity %v; want %v (the guest's), %v", v.LastWork, v.LastActivity, at(3), at(5))
	}
}

// An approval asked for a task that ended without an answer, before or
// after the request was read, waits for nobody: it is expired and not
// counted; one asked in the chat, or for a running task, waits.
func TestExpiredApprovals(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var log []Event
	add := func(host bool, typ, data string) {
		log = append(log, Event{ID: int64(len(log) + 1), Type: typ, Host: host, Data: json.RawMessage(data), At: t0.Add(time.Duration(len(log)) * time.Second)})
	}
	add(true, wire.EventTaskCreated, `{"task_id":"t1","run":1}`)
	add(false, protocol.EventTaskStarted, `{"task_id":"t1"}`)
	add(false, protocol.EventApprovalRequested, `{"approval_id":"during","task_id":"t1","tool":"exec","permission":"computer.exec","arguments":{}}`)
	add(false, protocol.EventTaskFailed, `{"task_id":"t1","error":"gave up"}`)
	// Read after the task's end (the guest's events arrive in a batch).
	add(false, protocol.EventApprovalRequested, `{"approval_id":"after","task_id":"t1","tool":"exec","permission":"computer.exec","arguments":{}}`)
	add(true, wire.EventTaskCreated, `{"task_id":"t2","run":1}`)
	add(false, protocol.EventTaskStarted, `{"task_id":"t2"}`)
	add(false, protocol.EventApprovalRequested, `{"approval_id":"running","task_id":"t2","tool":"exec","permission":"computer.exec","arguments":{}}`)
	add(false, protocol.EventApprovalRequested, `{"approval_id":"chat","tool":"exec","permission":"computer.exec","arguments":{}}`)
	// The control plane's own questions (a namespace's spend): one its day
	// ended on, logged as expired, and one that waits.
	add(true, wire.EventApprovalRequested, `{"approval_id":"spend-2026-11-30-5.00","tool":"dotquota","permission":"limits.spendPerDay","arguments":{}}`)
	add(true, wire.EventApprovalResolved, `{"approval_id":"spend-2026-11-30-5.00","decision":"expired"}`)
	add(true, wire.EventApprovalRequested, `{"approval_id":"spend-2026-12-01-5.00","tool":"dotquota","permission":"limits.spendPerDay","arguments":{}}`)
	v := NewView()
	v.Fold(log...)
	got := map[string]bool{}
	for id, a := range v.Approvals {
		got[id] = v.Expired(a)
	}
	want := map[string]bool{"during": true, "after": true, "running": false, "chat": false, "spend-2026-11-30-5.00": true, "spend-2026-12-01-5.00": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("expired -want +got:\n%s", diff)
	}
	if n := v.PendingApprovals(); n != 3 {
		t.Errorf("pending %d; want 3 (the running task's, the chat's and today's spend question)", n)
	}
}

func TestViewFoldsMCPAdditions(t *testing.T) {
	v := NewView()
	v.Fold(
		Event{ID: 1, Type: protocol.EventMCPServerAdded, Data: json.RawMessage(`{"arguments":{"name":"a"}}`)},
		Event{ID: 2, Type: protocol.EventMCPServerAdded, Data: json.RawMessage(`{"arguments":{"name":"b"}}`)},
		Event{ID: 3, Type: "dot.updated", Host: true, Data: json.RawMessage(`{"name":"d","mcp_server_added":"a","approval_id":"req-1","mcp_event":1}`)},
	)
	got := v.PendingMCPAdditions()
	if len(got) != 1 || got[0].EventID != 2 {
		t.Errorf("pending after one answer = %+v, want event 2", got)
	}
	if !v.MCPApprovalsUsed["req-1"] {
		t.Errorf("the approval of the written server is not used up")
	}
	v.Fold(Event{ID: 4, Type: "mcp.server.refused", Host: true, Data: json.RawMessage(`{"name":"b","reason":"r","mcp_event":2}`)})
	if got := v.PendingMCPAdditions(); len(got) != 0 {
		t.Errorf("pending after both answered = %+v", got)
	}
}

func TestViewFoldsDelegations(t *testing.T) {
	v := NewView()
	v.Fold(
		Event{ID: 1, Type: protocol.EventToolCalled, Data: json.RawMessage(`{"task_id":"t1","tool":"delegate_task","permission":"dots.delegate","decision":"allow","ok":true,"duration_ms":1,"arguments":{"dot":"helper","description":"x"}}`)},
		// A call that failed in the guest asked nothing.
		Event{ID: 2, Type: protocol.EventToolCalled, Data: json.RawMessage(`{"tool":"delegate_task","permission":"dots.delegate","decision":"allow","ok":false,"duration_ms":1}`)},
		// Another tool's call, even with arguments, is no request.
		Event{ID: 3, Type: protocol.EventToolCalled, Data: json.RawMessage(`{"tool":"exec","permission":"computer.exec","decision":"allow","ok":true,"duration_ms":1,"arguments":{"dot":"helper"}}`)},
		Event{ID: 4, Type: protocol.EventToolCalled, Data: json.RawMessage(`{"tool":"delegate_task","permission":"dots.delegate","decision":"ask","ok":true,"duration_ms":1,"arguments":{"dot":"other","description":"y"}}`)},
	)
	want := []Delegation{
		{EventID: 1, TaskID: "t1", Arguments: json.RawMessage(`{"dot":"helper","description":"x"}`)},
		{EventID: 4, Arguments: json.RawMessage(`{"dot":"other","description":"y"}`)},
	}
	if d := cmp.Diff(want, v.Delegations); d != "" {
		t.Errorf("delegations (-want +got):\n%s", d)
	}
}
