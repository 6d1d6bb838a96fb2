package lifecycle

import (
	"cmp"
	"slices"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Task is what the dispatcher knows of one of a Dot's Tasks.
type Task struct {
	Name        string
	Phase       dotsv1.TaskPhase
	Priority    int32
	Created     time.Time
	ScheduledAt *time.Time
	// CancelRequested: a person asked to cancel it.
	CancelRequested bool
}

// active: the Dot works on it (one at a time).
func (t Task) active() bool {
	return t.Phase == dotsv1.TaskRunning || t.Phase == dotsv1.TaskWaitingApproval
}

// due: PENDING, not cancelled, and its time has come.
func (t Task) due(now time.Time) bool {
	return t.Phase == dotsv1.TaskPending && !t.CancelRequested && (t.ScheduledAt == nil || !now.Before(*t.ScheduledAt))
}

// Dispatch is the dispatcher's answer for one Dot.
type Dispatch struct {
	// Next is the task to send now; empty when none may go.
	Next string
	// Blocked names the active task that holds the Dot, if one does.
	Blocked string
	// Wait is how long until the earliest scheduled task comes due (zero
	// when none waits for its time).
	Wait time.Duration
}

// NextTask picks the task to dispatch for one Dot (ref 9.2): one active
// task per Dot (RUNNING or WAITING_APPROVAL blocks the next), then among
// the due PENDING tasks the highest priority, then the oldest, then by
// name, so the order is the same every time for the same facts.
func NextTask(tasks []Task, now time.Time) Dispatch {
	var d Dispatch
	var due []Task
	for _, t := range tasks {
		switch {
		case t.active():
			d.Blocked = t.Name
		case t.due(now):
			due = append(due, t)
		case t.Phase == dotsv1.TaskPending && !t.CancelRequested && t.ScheduledAt != nil:
			if w := t.ScheduledAt.Sub(now); d.Wait == 0 || w < d.Wait {
				d.Wait = w
			}
		}
	}
	if d.Blocked != "" || len(due) == 0 {
		return d
	}
	d.Next = slices.MinFunc(due, func(a, b Task) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name))
	}).Name
	return d
}
