package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/patch"
	"github.com/invisible-dots/invisible-dots/internal/pgtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// DispatchControllerName names the dispatch reconciler.
const DispatchControllerName = "dispatch-controller"

// DispatchReconciler takes the control plane's decisions about a Dot's
// tasks, keyed by Dot: which task goes next (one at a time,
// lifecycle.NextTask), a cancel, a task given up because its computer
// cannot start; and it tells the log of a new generation of the Dot's spec
// and a new state of its Computer. Each decision is stored with its host
// events and outbox row in one transaction (WorkLog's Decide), idempotent
// by its row's id, so a control plane killed between two writes sends
// nothing twice. It writes no status: the activity status reconciler
// writes what the log gives.
type DispatchReconciler struct {
	Client   client.Client
	Log      *WorkLog
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
}

// SetupWithManager registers the reconciler: a Dot, its Computer, its Tasks
// and new events in its log wake it.
func (r *DispatchReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return setUpWork(mgr, r.Log, DispatchControllerName, workWatch{computers: true, tasks: true, quotas: true}, r)
}

// Reconcile logs what the log lacks of the Dot, cancels what a person
// cancelled, gives up a task its computer cannot start for and dispatches
// the next task.
func (r *DispatchReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dot := &dotsv1.Dot{}
	if err := r.Client.Get(ctx, req.NamespacedName, dot); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !dot.DeletionTimestamp.IsZero() {
		// Nothing more goes to a guest that is going; the log stays for
		// the Dot's history until its namespace goes.
		r.Log.Forget(dot.UID)
		return ctrl.Result{}, r.Log.Store.DropUndelivered(ctx, string(dot.UID), "the Dot was deleted")
	}
	tasks, err := r.Log.dotTasks(ctx, r.Client, dot)
	if err != nil {
		return ctrl.Result{}, err
	}
	w, err := r.Log.Open(ctx, storeDot(dot))
	if err != nil {
		return ctrl.Result{}, err
	}
	defer w.Close()

	steps := &workSteps{}
	steps.run("log the Dot's configuration", r.logDot(ctx, dot, w))
	for i := range tasks {
		steps.run("cancel task "+tasks[i].Name, r.cancel(ctx, tasks[i], w))
	}
	d := lifecycle.NextTask(taskFacts(tasks, w.View()), r.Clock.Now())
	held, err := spendHold(ctx, r.Client, dot.Namespace)
	steps.run("read the namespace's spend cap", err)
	steps.run("hold tasks at the namespace's spend cap", r.hold(ctx, tasks, held, w))
	if d.Next != "" && held == nil {
		steps.run("dispatch task "+d.Next, r.dispatch(ctx, taskNamed(tasks, d.Next), w))
	}
	steps.run("give up a task its computer cannot start for", r.giveUpUnstartable(ctx, dot, w, tasks))
	return steps.result(ctx, r.Recorder, dot, ctrl.Result{RequeueAfter: d.Wait})
}

func taskNamed(tasks []*dotsv1.Task, name string) *dotsv1.Task {
	for _, t := range tasks {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// logDot tells the log of a new generation of the Dot's spec and of a new
// state of its Computer, once each: the view, folded from the log, says
// what is already told.
func (r *DispatchReconciler) logDot(ctx context.Context, dot *dotsv1.Dot, w *DotWork) error {
	view, id := w.View(), w.id
	if dot.Generation > view.Generation {
		typ := wire.EventDotUpdated
		if view.Generation == 0 {
			typ = wire.EventDotCreated
		}
		data, _ := json.Marshal(map[string]any{"generation": dot.Generation})
		if err := w.Decide(ctx, nil, store.Event{Dot: id, Type: typ, Source: store.SourceHost, Data: data}); err != nil {
			return err
		}
	}
	c, err := dotComputer(ctx, r.Client, dot)
	if err != nil || c == nil {
		return err
	}
	if state := string(c.Status.State); state != "" && state != view.ComputerState {
		data, _ := json.Marshal(map[string]any{"state": state, "stop_reason": c.Status.StopReason})
		return w.Decide(ctx, nil, store.Event{Dot: id, Type: wire.EventComputerState, Source: store.SourceHost, Data: data})
	}
	return nil
}

// dispatch gives the task to the Dot: a run opens (host task.created) and
// its task.created goes into the outbox, in one transaction.
func (r *DispatchReconciler) dispatch(ctx context.Context, t *dotsv1.Task, w *DotWork) error {
	run := 1
	if v, ok := w.View().Tasks[string(t.UID)]; ok {
		run = v.Runs + 1
	}
	uid, id := string(t.UID), w.id
	created := protocol.TaskCreated{TaskID: uid, Description: t.Spec.Description, Priority: int(t.Spec.Priority)}
	if rb := t.Spec.RequestedBy; rb != nil && rb.Dot != "" {
		// Another Dot's request is untrusted input to the receiver.
		created.RequestedBy = &rb.Dot
	}
	body, err := json.Marshal(created)
	if err != nil {
		return err
	}
	logged, _ := json.Marshal(map[string]any{"task_id": uid, "task": t.Name, "run": run})
	err = w.Decide(ctx, &store.Inbound{ID: store.TaskCreatedID(uid, run), Dot: id, Type: protocol.InboundTaskCreated, Data: body, TaskUID: uid, Run: run},
		store.Event{Dot: id, Type: wire.EventTaskCreated, Source: store.SourceHost, Data: logged})
	if err == nil {
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "Dispatched", "Dispatch", "given to Dot %s (run %d)", t.Spec.DotName, run)
	}
	return err
}

// cancel ends a task a person cancelled: one never given to the Dot, or
// whose task.created never left, is dropped; one the guest may hold is
// cancelled there with a system.event behind its task.created.
func (r *DispatchReconciler) cancel(ctx context.Context, t *dotsv1.Task, w *DotWork) error {
	if !t.Spec.CancelRequested {
		return nil
	}
	uid, id := string(t.UID), w.id
	v, dispatched := w.View().Tasks[uid]
	if dispatched && v.Phase.Ended() {
		return nil
	}
	logged, _ := json.Marshal(map[string]any{"task_id": uid, "task": t.Name})
	ev := store.Event{Dot: id, Type: wire.EventTaskCancelled, Source: store.SourceHost, Data: logged}
	if !dispatched || v.Runs == 0 {
		return w.Decide(ctx, nil, ev)
	}
	dropped, err := r.Log.Store.DropUnsent(ctx, store.TaskCreatedID(uid, v.Runs), "cancelled before it was sent")
	if err != nil {
		return err
	}
	if dropped {
		return w.Decide(ctx, nil, ev)
	}
	data, _ := json.Marshal(protocol.TaskCancelled{TaskID: uid})
	body, _ := json.Marshal(protocol.SystemEvent{Name: protocol.SystemEventTaskCancelled, Data: data})
	return w.Decide(ctx, &store.Inbound{ID: "cancel-" + uid, Dot: id, Type: protocol.InboundSystemEvent, Data: body, TaskUID: uid, Run: v.Runs}, ev)
}

// giveUpUnstartable fails the Dot's current task when its computer failed
// to start lifecycle.MaxTaskFailures times in a row (the crash-loop record)
// before the task reached the guest: a failed wake counts toward giving a
// task up (ref 9.2), so a Dot that cannot be made READY does not hold its
// queue for ever. The task's task.created row is dropped and task.failed
// logged in one transaction, naming the computer's reason; a row that was
// delivered meanwhile is left alone.
func (r *DispatchReconciler) giveUpUnstartable(ctx context.Context, dot *dotsv1.Dot, w *DotWork, tasks []*dotsv1.Task) error {
	view := w.View()
	current := view.CurrentTask()
	if current == "" {
		return nil
	}
	c, err := dotComputer(ctx, r.Client, dot)
	if err != nil || c == nil {
		return err
	}
	sf := c.Status.StartFailure
	if sf == nil || int(sf.ConsecutiveFailCount) < lifecycle.MaxTaskFailures || c.Status.State == dotsv1.ComputerRunning {
		return nil
	}
	v := view.Tasks[current]
	reason := fmt.Sprintf("the Dot's computer failed to start %d times in a row", sf.ConsecutiveFailCount)
	if sf.Message != "" {
		reason += ": " + sf.Message
	}
	data, err := json.Marshal(wire.TaskFailed{TaskID: current, Run: v.Runs, Error: reason})
	if err != nil {
		return err
	}
	failed := store.Event{Dot: w.id, Type: wire.EventTaskFailed, Source: store.SourceHost, Data: data}
	gaveUp, err := r.Log.Store.GiveUpTask(ctx, store.TaskCreatedID(current, v.Runs), reason, r.Clock.Now(), failed)
	if err != nil {
		return err
	}
	if gaveUp {
		for i := range tasks {
			if string(tasks[i].UID) == current {
				if r.Recorder != nil {
					r.Recorder.Eventf(tasks[i], nil, corev1.EventTypeWarning, "GivenUp", "Fail", "%s", pgtext.String(truncate(reason, 512)))
				}
			}
		}
		err = w.Fold(ctx)
	}
	return err
}

// spendCapHold is why a namespace's work is held: its daily spend cap is
// reached (the DotQuota's SpendCapReached condition).
type spendCapHold struct {
	// Rejected: a person refused more for the day.
	Rejected bool
	Message  string
}

// spendHold reads whether the namespace's daily spend cap holds its work:
// nil when it does not.
func spendHold(ctx context.Context, c client.Reader, namespace string) (*spendCapHold, error) {
	q, err := namespaceQuota(ctx, c, namespace)
	if err != nil || q == nil {
		return nil, err
	}
	cond := meta.FindStatusCondition(q.Status.Conditions, dotsv1.SpendCapReachedCondition)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		return nil, nil
	}
	return &spendCapHold{Rejected: cond.Reason == dotsv1.SpendRejectedReason, Message: cond.Message}, nil
}

// hold keeps the Dot's PENDING tasks PENDING while its namespace's spend
// cap holds them, saying so in their Held condition, and fails them once a
// person refused more for the day (a task.failed of the log, as the
// deliverer's give-up). Tasks already running are not interrupted:
// stopping a turn is the engine's. Once nothing holds, the condition goes
// False.
func (r *DispatchReconciler) hold(ctx context.Context, tasks []*dotsv1.Task, held *spendCapHold, w *DotWork) error {
	view := w.View()
	now := r.Clock.Now()
	for _, t := range tasks {
		if v, ok := view.Tasks[string(t.UID)]; (ok && v.Phase != dotsv1.TaskPending) || t.Spec.CancelRequested || !t.DeletionTimestamp.IsZero() {
			continue
		}
		if held != nil && held.Rejected {
			reason := truncate(held.Message, 512)
			data, err := json.Marshal(wire.TaskFailed{TaskID: string(t.UID), Error: reason})
			if err != nil {
				return err
			}
			if err := w.Decide(ctx, nil, store.Event{Dot: w.id, Type: wire.EventTaskFailed, Source: store.SourceHost, Data: data}); err != nil {
				return err
			}
			r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, "SpendCapRejected", "Fail", "%s", pgtext.String(reason))
			continue
		}
		was := meta.FindStatusCondition(t.Status.Conditions, dotsv1.HeldCondition)
		if held == nil && (was == nil || was.Status != metav1.ConditionTrue) {
			continue
		}
		t = t.DeepCopy() // the cache's own (dotTasks)
		h := patch.NewHelper(r.Client, patch.Writer{Name: DispatchControllerName, Conditions: []string{dotsv1.HeldCondition}}, t)
		if held != nil {
			patch.SetCondition(t, now, dotsv1.HeldCondition, metav1.ConditionTrue, dotsv1.SpendCapHeldReason, held.Message)
		} else {
			patch.SetCondition(t, now, dotsv1.HeldCondition, metav1.ConditionFalse, dotsv1.NotHeldReason, "")
		}
		if _, err := h.Patch(ctx, t); err != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}
