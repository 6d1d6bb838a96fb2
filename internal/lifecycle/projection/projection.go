// Package projection folds a Dot's event log into the state its statuses and
// the control plane's decisions are computed from (View): each Task's phase,
// runs and spend, the Dot's agent state, current task, pending approvals and
// last activity, the approvals and MCP servers the guest asked for, and what
// the control plane has already logged. It reads events and nothing else;
// what to do about the state is the decisions' (internal/lifecycle).
package projection

import (
	"encoding/json"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// Event is what the projection reads of one row of the log.
type Event struct {
	ID   int64
	Type string
	// Host: told by the control plane; false: by the guest.
	Host bool
	Data json.RawMessage
	At   time.Time
}

// TaskView is a Task's status as the log tells it.
type TaskView struct {
	Phase    dotsv1.TaskPhase
	Runs     int
	Summary  string
	Error    string
	Progress string
	SpentUSD float64
	// RunTimes are the task's runs, oldest first, with the times the log
	// gives them; Ended is when the task ended (the end of its last run).
	RunTimes []RunTimes
	Ended    time.Time
}

// RunTimes is one run of a task as the log tells it: opened when the
// dispatcher gave the task to the Dot (task.created), delivered when the
// guest began it (task.started), finished when it ended or a later run
// opened.
type RunTimes struct {
	Number                       int
	Started, Delivered, Finished time.Time
	// Outcome is the phase the run ended the task in, or RunInterrupted.
	Outcome string
}

// RunInterrupted is the outcome of a run that ended without ending its
// task (its computer stopped, the task was given to the Dot again).
const RunInterrupted = "Interrupted"

// openRun starts run n at at; a run still open before it was interrupted.
func (t *TaskView) openRun(n int, at time.Time) {
	if last := t.lastRun(); last != nil {
		if last.Number >= n {
			return // told again
		}
		if last.Finished.IsZero() {
			last.Finished, last.Outcome = at, RunInterrupted
		}
	}
	t.RunTimes = append(t.RunTimes, RunTimes{Number: n, Started: at})
}

func (t *TaskView) lastRun() *RunTimes {
	if len(t.RunTimes) == 0 {
		return nil
	}
	return &t.RunTimes[len(t.RunTimes)-1]
}

// delivered marks the open run as begun by the guest.
func (t *TaskView) delivered(at time.Time) {
	if r := t.lastRun(); r != nil && r.Delivered.IsZero() && r.Finished.IsZero() {
		r.Delivered = at
	}
}

// end ends the task in phase at at, with its open run.
func (t *TaskView) end(phase dotsv1.TaskPhase, at time.Time) {
	t.Phase, t.Ended = phase, at
	if r := t.lastRun(); r != nil && r.Finished.IsZero() {
		r.Finished, r.Outcome = at, string(phase)
	}
}

// ApprovalView is what the log tells of one approval the guest asked for.
type ApprovalView struct {
	Requested protocol.ApprovalRequested
	Resolved  bool
	// Lapsed: the control plane logged that its own question expired
	// unanswered (wire.DecisionExpired).
	Lapsed bool
}

// View is a Dot's statuses as its log tells them: the one source of a
// Task's phase, summary, error, spend and progress, of the Dot's
// agentState, currentTask, pendingApprovals and lastActivityTime, and of the
// Computer's nextAutomationTime. A status erased by hand comes back from it.
type View struct {
	// Tasks by task id (the Task's UID, as task.created carries it).
	Tasks map[string]*TaskView
	// Approvals by approval id, in the order asked.
	Approvals     map[string]*ApprovalView
	ApprovalOrder []string
	AgentState    protocol.AgentState
	// LastActivity is the newest event of any kind: the idle clock.
	// LastWork is the newest event of the Dot's work, its
	// lastActivityTime: every event but the records of changes made to
	// the Dot, its computer and its channels (notWork), so a spec patch or
	// a start is not taken for something the Dot did.
	LastActivity   time.Time
	LastWork       time.Time
	NextAutomation *time.Time
	// LastID is the last event folded in.
	LastID int64
	// Generation is the Dot's last generation the log tells of
	// (dot.created, dot.updated), and ComputerState its Computer's last
	// state (computer.state): what is already logged is not logged again.
	Generation    int64
	ComputerState string
	// MCPAdditions are the guest's mcp.server.added in log order;
	// MCPAnswered those a host event answered (dot.updated or
	// mcp.server.refused, naming the event), and MCPApprovalsUsed the
	// approvals an addition used up (ref 5.4: one approval adds one server
	// once).
	MCPAdditions     []MCPAddition
	MCPAnswered      map[int64]bool
	MCPApprovalsUsed map[string]bool
	// Delegations are the guest's delegate_task calls that ran (tool.called
	// ok, with their arguments), in log order: requests of another Dot the
	// control plane decides.
	Delegations []Delegation
}

// NewView is an empty view.
func NewView() *View {
	return &View{Tasks: map[string]*TaskView{}, Approvals: map[string]*ApprovalView{},
		MCPAnswered: map[int64]bool{}, MCPApprovalsUsed: map[string]bool{}}
}

// CurrentTask is the task the Dot works on (RUNNING or WAITING_APPROVAL),
// or "".
func (v *View) CurrentTask() string {
	for id, t := range v.Tasks {
		if t.Phase == dotsv1.TaskRunning || t.Phase == dotsv1.TaskWaitingApproval {
			return id
		}
	}
	return ""
}

// PendingApprovals counts the approvals asked, not resolved and not
// expired: an approval whose task ended waits for nobody.
func (v *View) PendingApprovals() int {
	n := 0
	for _, a := range v.Approvals {
		if !a.Resolved && !v.Expired(a) {
			n++
		}
	}
	return n
}

// Expired says whether an approval asked is moot: not resolved, and asked
// for a task that has ended (completed, failed or cancelled), whether the
// end came before the request was read or after; or a question of the
// control plane that the log says lapsed.
func (v *View) Expired(a *ApprovalView) bool {
	if a.Lapsed {
		return true
	}
	if a.Resolved || a.Requested.TaskID == nil {
		return false
	}
	t, ok := v.Tasks[*a.Requested.TaskID]
	return ok && t.Phase.Ended()
}

func (v *View) task(id string) *TaskView {
	t, ok := v.Tasks[id]
	if !ok {
		t = &TaskView{Phase: dotsv1.TaskPending}
		v.Tasks[id] = t
	}
	return t
}

// notWork are the host's events that record a change made to the Dot, its
// computer or its channels, not something it did.
var notWork = map[string]bool{
	wire.EventDotCreated: true, wire.EventDotUpdated: true, wire.EventComputerState: true, wire.EventChannelStatus: true,
}

// Fold applies events, in id order, to the view. An event whose data does
// not parse changes nothing but the activity time: the log keeps it, and
// ingestion stored what the protocol refused as guest.event.refused.
func (v *View) Fold(events ...Event) {
	for _, e := range events {
		if e.ID <= v.LastID {
			continue // folded already
		}
		v.LastID = e.ID
		if e.At.After(v.LastActivity) {
			v.LastActivity = e.At
		}
		if e.At.After(v.LastWork) && !(e.Host && notWork[e.Type]) {
			v.LastWork = e.At
		}
		if e.Host {
			v.foldHost(e)
		} else {
			v.foldGuest(e)
		}
	}
}

func (v *View) foldHost(e Event) {
	var d struct {
		TaskID     string `json:"task_id"`
		ApprovalID string `json:"approval_id"`
		Run        int    `json:"run"`
		Error      string `json:"error"`
		Generation int64  `json:"generation"`
		State      string `json:"state"`
		// MCPEvent is the guest's mcp.server.added a dot.updated or an
		// mcp.server.refused answers.
		MCPEvent int64 `json:"mcp_event"`
		// Decision is an approval.resolved's.
		Decision string `json:"decision"`
	}
	if json.Unmarshal(e.Data, &d) != nil {
		return
	}
	switch e.Type {
	case wire.EventDotCreated, wire.EventDotUpdated:
		v.Generation = max(v.Generation, d.Generation)
		if d.MCPEvent != 0 {
			v.MCPAnswered[d.MCPEvent] = true
			if d.ApprovalID != "" {
				v.MCPApprovalsUsed[d.ApprovalID] = true
			}
		}
	case wire.EventMCPServerRefused:
		v.MCPAnswered[d.MCPEvent] = true
	case wire.EventComputerState:
		v.ComputerState = d.State
	case wire.EventTaskCreated:
		// The dispatcher gave the task to the Dot: a run opens.
		if t := v.task(d.TaskID); !t.Phase.Ended() {
			t.Phase, t.Runs = dotsv1.TaskRunning, max(t.Runs, d.Run, t.Runs+1)
			t.openRun(t.Runs, e.At)
		}
	case wire.EventTaskCancelled:
		if t := v.task(d.TaskID); !t.Phase.Ended() {
			t.end(dotsv1.TaskCancelled, e.At)
		}
	case wire.EventTaskFailed:
		// The deliverer gave the task up.
		if t := v.task(d.TaskID); !t.Phase.Ended() {
			t.end(dotsv1.TaskFailed, e.At)
			t.Error = d.Error
		}
	case wire.EventApprovalRequested:
		// The control plane's own question (a namespace's spend): it
		// waits as a guest's does.
		var ev protocol.ApprovalRequested
		if json.Unmarshal(e.Data, &ev) == nil && ev.ApprovalID != "" {
			v.asked(&ev)
		}
	case wire.EventApprovalResolved:
		if a, ok := v.Approvals[d.ApprovalID]; ok && !a.Resolved {
			a.Resolved = true
			a.Lapsed = d.Decision == wire.DecisionExpired
			if a.Requested.TaskID != nil {
				if t := v.task(*a.Requested.TaskID); t.Phase == dotsv1.TaskWaitingApproval {
					t.Phase = dotsv1.TaskRunning
				}
			}
		}
	}
}

// asked folds a request for a person's decision, the guest's or the
// control plane's.
func (v *View) asked(ev *protocol.ApprovalRequested) {
	if _, ok := v.Approvals[ev.ApprovalID]; !ok {
		v.Approvals[ev.ApprovalID] = &ApprovalView{Requested: *ev}
		v.ApprovalOrder = append(v.ApprovalOrder, ev.ApprovalID)
	}
	if ev.TaskID != nil {
		if t := v.task(*ev.TaskID); t.Phase == dotsv1.TaskRunning {
			t.Phase = dotsv1.TaskWaitingApproval
		}
	}
}

// guestData decodes a stored guest event's data into its protocol type;
// ingestion checked it against the protocol before it was stored.
func guestData(e Event) any {
	var out any
	switch e.Type {
	case protocol.EventAgentState:
		out = &protocol.AgentStateChanged{}
	case protocol.EventTaskStarted:
		out = &protocol.TaskStarted{}
	case protocol.EventTaskProgress:
		out = &protocol.TaskProgress{}
	case protocol.EventTaskCompleted:
		out = &protocol.TaskCompleted{}
	case protocol.EventTaskFailed:
		out = &protocol.TaskFailed{}
	case protocol.EventApprovalRequested:
		out = &protocol.ApprovalRequested{}
	case protocol.EventAutomationNextRun:
		out = &protocol.AutomationNextRun{}
	case protocol.EventMCPServerAdded:
		out = &protocol.MCPServerAdded{}
	case protocol.EventToolCalled:
		out = &protocol.ToolCalled{}
	default:
		return nil // nothing of a status comes from it
	}
	if json.Unmarshal(e.Data, out) != nil {
		return nil
	}
	return out
}

func (v *View) foldGuest(e Event) {
	parsed := guestData(e)
	spent := func(t *TaskView, usd *float64) {
		if usd != nil && *usd > t.SpentUSD {
			t.SpentUSD = *usd
		}
	}
	switch ev := parsed.(type) {
	case *protocol.AgentStateChanged:
		v.AgentState = ev.State
	case *protocol.TaskStarted:
		if t := v.task(ev.TaskID); !t.Phase.Ended() {
			t.Phase = dotsv1.TaskRunning
			t.delivered(e.At)
		}
	case *protocol.TaskProgress:
		t := v.task(ev.TaskID)
		t.Progress = ev.Text
		spent(t, ev.SpentUSD)
	case *protocol.TaskCompleted:
		t := v.task(ev.TaskID)
		spent(t, ev.SpentUSD)
		if !t.Phase.Ended() {
			t.end(dotsv1.TaskCompleted, e.At)
			t.Summary = ev.Summary
		}
	case *protocol.TaskFailed:
		t := v.task(ev.TaskID)
		spent(t, ev.SpentUSD)
		if !t.Phase.Ended() {
			t.end(dotsv1.TaskFailed, e.At)
			t.Error = ev.Error
		}
	case *protocol.MCPServerAdded:
		v.MCPAdditions = append(v.MCPAdditions, MCPAddition{EventID: e.ID, Arguments: ev.Arguments})
	case *protocol.ToolCalled:
		if ev.Tool == delegateTool && ev.OK && len(ev.Arguments) > 0 {
			d := Delegation{EventID: e.ID, Arguments: ev.Arguments}
			if ev.TaskID != nil {
				d.TaskID = *ev.TaskID
			}
			v.Delegations = append(v.Delegations, d)
		}
	case *protocol.ApprovalRequested:
		v.asked(ev)
	case *protocol.AutomationNextRun:
		if ev.NextRunAtMS == nil {
			v.NextAutomation = nil
		} else {
			t := time.UnixMilli(*ev.NextRunAtMS).UTC()
			v.NextAutomation = &t
		}
	}
}

// MCPAddition is a guest's mcp.server.added: a call of add_mcp_server that
// ran (ref 5.4), which the control plane decides again before it writes the
// server into the Dot's spec.
type MCPAddition struct {
	// EventID is the guest event's id in the log; the host event that
	// answers it names it (mcp_event), so it is answered once.
	EventID   int64
	Arguments json.RawMessage
}

// PendingMCPAdditions are the additions no host event answered yet, oldest
// first.
func (v *View) PendingMCPAdditions() []MCPAddition {
	var out []MCPAddition
	for _, a := range v.MCPAdditions {
		if !v.MCPAnswered[a.EventID] {
			out = append(out, a)
		}
	}
	return out
}

// delegateTool is the guest's tool that asks another Dot for a task
// (guest/engine/tools; lifecycle.DelegateTool).
const delegateTool = "delegate_task"

// Delegation is a guest's delegate_task call that ran: a request of another
// Dot, which the control plane decides (lifecycle.DecideDelegation).
type Delegation struct {
	// EventID is the tool.called's id in the log: the request's identity.
	EventID int64
	// TaskID is the asker's task the call was made in (its Task's UID),
	// "" for the chat.
	TaskID    string
	Arguments json.RawMessage
}
