package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// ActivityStatusControllerName names the reconciler of the statuses a Dot's
// log gives.
const ActivityStatusControllerName = "activity-status-controller"

// The status writers of the activity status reconciler: fields the log
// gives, no conditions. Of a Task: phase, summary, error, progress,
// spentUSD, runs, startTime and completionTime (the Task reconciler writes
// its first PENDING and its binding). Of a Dot: agentState, currentTask,
// pendingApprovals and lastActivityTime (the Dot reconciler writes the
// phase, from them among others). Of a Computer: nextAutomationTime (its
// host agent writes the rest).
//
// They write without the resourceVersion lock (patch.Writer.NoLock): the
// fields are theirs alone and come from the log, not from the object, and
// under the lock they lost a write to the Dot reconciler about three times
// for each new Dot, both being woken by the same events.
var (
	taskActivityWriter     = patch.Writer{Name: ActivityStatusControllerName + "/task", NoLock: true}
	dotActivityWriter      = patch.Writer{Name: ActivityStatusControllerName + "/dot", NoLock: true}
	computerActivityWriter = patch.Writer{Name: ActivityStatusControllerName + "/computer", NoLock: true}
)

// ActivityStatusReconciler writes the statuses a Dot's event log gives,
// keyed by Dot: a Task's phase, summary, error, spend, progress and runs;
// the Dot's agentState, currentTask, pendingApprovals and lastActivityTime;
// the Computer's nextAutomationTime. Each is recomputed from the log, so a
// status erased by hand comes back. It decides nothing.
type ActivityStatusReconciler struct {
	Client   client.Client
	Log      *WorkLog
	Recorder recorder.EventRecorder
}

// SetupWithManager registers the reconciler: a Dot, its Computer, its Tasks
// and new events in its log wake it.
func (r *ActivityStatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return setUpWork(mgr, r.Log, ActivityStatusControllerName, workWatch{computers: true, tasks: true}, r)
}

// Reconcile writes what the log gives of the Dot, its Tasks and its
// Computer, each only when it changed.
func (r *ActivityStatusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	in, err := openWork(ctx, r.Client, r.Log, req, true, false)
	if in == nil || err != nil {
		return ctrl.Result{}, err
	}
	defer in.Close()
	steps := &workSteps{}
	steps.run("write the statuses", r.writeStatuses(ctx, in.Dot, in.View(), in.Tasks))
	return steps.result(ctx, r.Recorder, in.Dot, ctrl.Result{})
}

// writeStatuses writes what the log gives of the Dot, its Tasks and its
// Computer, each only when it changed.
func (r *ActivityStatusReconciler) writeStatuses(ctx context.Context, dot *dotsv1.Dot, view *projection.View, tasks []*dotsv1.Task) error {
	names := map[string]string{}
	for i := range tasks {
		names[string(tasks[i].UID)] = tasks[i].Name
		v, ok := view.Tasks[string(tasks[i].UID)]
		if !ok {
			continue // PENDING, as the Task reconciler wrote it
		}
		// The status as the log gives it, beside the Task's own (a copy of
		// its top level: every field is set whole, nothing within changed).
		want := tasks[i].Status
		want.Phase, want.Summary, want.Error = v.Phase, v.Summary, v.Error
		want.Progress, want.SpentUSD = v.Progress, protocol.RoundUSD(v.SpentUSD)
		want.Runs, want.StartTime, want.CompletionTime = taskRuns(v)
		if equality.Semantic.DeepEqual(want, tasks[i].Status) {
			continue // most of a busy Dot's tasks ended long ago
		}
		t := tasks[i].DeepCopy()
		helper := patch.NewHelper(r.Client, taskActivityWriter, t)
		t.Status = want
		if _, err := helper.Patch(ctx, t); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}

	helper := patch.NewHelper(r.Client, dotActivityWriter, dot)
	dot.Status.AgentState = string(view.AgentState)
	dot.Status.CurrentTask = names[view.CurrentTask()]
	dot.Status.PendingApprovals = int32(view.PendingApprovals())
	if !view.LastWork.IsZero() {
		dot.Status.LastActivityTime = &metav1.Time{Time: view.LastWork.Truncate(time.Second)}
	}
	if _, err := helper.Patch(ctx, dot); err != nil && !apierrors.IsNotFound(err) {
		return err
	}

	computer, err := dotComputer(ctx, r.Client, dot)
	if err != nil || computer == nil {
		return err
	}
	ch := patch.NewHelper(r.Client, computerActivityWriter, computer)
	computer.Status.NextAutomationTime = nil
	if view.NextAutomation != nil {
		computer.Status.NextAutomationTime = &metav1.Time{Time: *view.NextAutomation}
	}
	_, err = ch.Patch(ctx, computer)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// taskRuns is a task's runs and times as its Task's status says them,
// to the second, the newest runs kept when there are more than the status
// holds. A task that ended has its completion time whether or not it ran:
// one cancelled while PENDING, or one the guest ended before the host's
// task.created was logged, ended all the same, and the lists of ended tasks
// (the Inbox's failures of the day) read that time.
func taskRuns(v *projection.TaskView) (runs []dotsv1.TaskRun, start, completion *metav1.Time) {
	at := func(t time.Time) *metav1.Time {
		if t.IsZero() {
			return nil
		}
		return &metav1.Time{Time: t.Truncate(time.Second)}
	}
	for _, r := range v.RunTimes {
		runs = append(runs, dotsv1.TaskRun{Number: int32(r.Number), Started: at(r.Started), Delivered: at(r.Delivered),
			Finished: at(r.Finished), Outcome: r.Outcome})
	}
	if len(runs) > maxTaskRuns {
		runs = runs[len(runs)-maxTaskRuns:]
	}
	if len(v.RunTimes) > 0 {
		start = at(v.RunTimes[0].Started)
	}
	return runs, start, at(v.Ended)
}

// maxTaskRuns is the most runs a Task's status holds (its CRD's bound).
const maxTaskRuns = 64
