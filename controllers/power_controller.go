package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// PowerControllerName names the reconciler that wakes and sleeps a Dot's
// computer.
const PowerControllerName = "power-controller"

// PowerReconciler applies the sleep and wake decision (ref 9.5,
// lifecycle.Decide) to a Dot's Computer, keyed by Dot: a start or a sleep
// request its host agent acts on (the Computer's annotations, a merge patch
// over the version read). It reads the Dot's work from its log's view and
// its outbox, and writes no status.
type PowerReconciler struct {
	Client   client.Client
	Log      *WorkLog
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
}

// SetupWithManager registers the reconciler: a Dot, its Computer, its Tasks
// and new events in its log wake it.
func (r *PowerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return setUpWork(mgr, r.Log, PowerControllerName, workWatch{computers: true, tasks: true, quotas: true}, r)
}

// Reconcile wakes or sleeps the Dot's computer, and looks again when the
// decision or a scheduled task says to.
func (r *PowerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	in, err := openWork(ctx, r.Client, r.Log, req, true, false)
	if in == nil || err != nil {
		return ctrl.Result{}, err
	}
	defer in.Close()
	now := r.Clock.Now()
	d := lifecycle.NextTask(taskFacts(in.Tasks, in.View()), now)
	steps := &workSteps{}
	after, err := r.wakeOrSleep(ctx, in.Dot, in.View(), d, now)
	steps.run("wake or sleep the computer", err)
	// A task scheduled for later wakes the computer when it comes due.
	if d.Wait > 0 && (after == 0 || d.Wait < after) {
		after = d.Wait
	}
	return steps.result(ctx, r.Recorder, in.Dot, ctrl.Result{RequeueAfter: after})
}

// wakeOrSleep applies the sleep and wake decision (ref 9.5) to the Dot's
// Computer, as a start or a sleep request its host agent acts on. It
// returns when to look again with nothing changed.
func (r *PowerReconciler) wakeOrSleep(ctx context.Context, dot *dotsv1.Dot, view *projection.View, d lifecycle.Dispatch, now time.Time) (time.Duration, error) {
	c, err := dotComputer(ctx, r.Client, dot)
	if err != nil || c == nil || !c.DeletionTimestamp.IsZero() {
		return 0, err
	}
	undelivered, err := r.Log.Store.Undelivered(ctx, string(dot.UID))
	if err != nil {
		return 0, err
	}
	held, err := spendHold(ctx, r.Client, dot.Namespace)
	if err != nil {
		return 0, err
	}
	if held != nil && undelivered > 0 {
		// Work the namespace's spend cap holds wakes nothing and keeps
		// nothing awake: only what the outbox would hand out counts.
		rows, err := r.Log.Store.Pending(ctx, string(dot.UID))
		if err != nil {
			return 0, err
		}
		types := make([]string, len(rows))
		for i, in := range rows {
			types[i] = in.Type
		}
		undelivered = lifecycle.Deliverable(types)
	}
	f := lifecycle.Facts{
		Work: lifecycle.Work{
			// A task the dispatcher would send now: due, and no active
			// task holds the Dot, nor the namespace's spend cap.
			DueTask:        d.Next != "" && held == nil,
			ActiveTask:     view.CurrentTask() != "",
			Undelivered:    undelivered,
			NextAutomation: view.NextAutomation,
		},
		Strategy:     c.Spec.RunStrategy,
		State:        c.Status.State,
		StopReason:   c.Status.StopReason,
		Phase:        dot.Status.Phase,
		AgentState:   string(view.AgentState),
		LastActivity: view.LastActivity,
		Now:          now,
	}
	if dot.Spec.Computer.IdleTimeout != nil {
		f.IdleTimeout = dot.Spec.Computer.IdleTimeout.Duration
	}
	// The wake lead is the host's (its host.yaml, reported on its Host).
	if host := (&dotsv1.Host{}); c.Spec.NodeName != "" && r.Client.Get(ctx, client.ObjectKey{Name: c.Spec.NodeName}, host) == nil && host.Status.WakeLead != nil {
		f.WakeLead = host.Status.WakeLead.Duration
	}
	if f.LastActivity.IsZero() {
		f.LastActivity = dot.CreationTimestamp.Time
	}
	decision := lifecycle.Decide(f)
	gated := c.Gated(dotsv1.ActiveDotsGate)
	if decision.Action == lifecycle.Wake && gated && !c.RequestPending(dotsv1.StartRequestedAnnotation, c.Status.HandledStartRequest) {
		// The start is asked for before a slot is taken (the gate holds
		// it meanwhile), so the quota controller, which gives back the
		// slot of a gated computer nobody asks to start, keeps the slot
		// this start takes.
		asked := c.DeepCopy()
		asked.RequestStart(now)
		if err := r.Client.Patch(ctx, asked, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
			return 0, err
		}
		c = asked
	}
	if decision.Action == lifecycle.Wake || (gated && lifecycle.WantsStart(c)) {
		// The computer is to start: its Dot takes an active slot of its
		// namespace first, or stays inactive, its work queued.
		admitted, err := r.admit(ctx, dot, c, now)
		if err != nil || !admitted {
			return activeSlotRetry, err
		}
	}
	switch decision.Action {
	case lifecycle.Wake:
		if c.RequestPending(dotsv1.StartRequestedAnnotation, c.Status.HandledStartRequest) && !gated {
			return decision.After, nil
		}
		// The start a person asks for, by the same rule: a person's work
		// wakes a computer a person stopped, and from that start on it
		// sleeps and wakes like any other (ref 9.5).
		woken := c.DeepCopy()
		woken.SetGate(dotsv1.ActiveDotsGate, false)
		if !gated {
			woken.RequestStart(now)
		}
		if err := r.Client.Patch(ctx, woken, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
			return 0, err
		}
		r.Recorder.Eventf(dot, c, corev1.EventTypeNormal, "Waking", "Wake", "Computer %s is started: %s", c.Name, decision.Why)
	case lifecycle.Stay:
		if gated && lifecycle.WantsStart(c) {
			// Admitted: the start its host agent holds (a new computer, a
			// person's start) goes ahead.
			open := c.DeepCopy()
			open.SetGate(dotsv1.ActiveDotsGate, false)
			if err := r.Client.Patch(ctx, open, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
				return 0, err
			}
		}
	case lifecycle.Sleep:
		if c.RequestPending(dotsv1.SleepRequestedAnnotation, c.Status.HandledSleepRequest) {
			return decision.After, nil
		}
		asleep := c.DeepCopy()
		asleep.RequestSleep(now)
		if err := r.Client.Patch(ctx, asleep, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
			return 0, err
		}
		r.Recorder.Eventf(dot, c, corev1.EventTypeNormal, "Sleeping", "Sleep", "Computer %s goes to sleep: %s", c.Name, decision.Why)
	}
	return decision.After, nil
}

// activeSlotRetry is how soon a Dot waiting for an active slot looks again
// when no change to its namespace's quota woke it.
const activeSlotRetry = 30 * time.Second

// admit takes an active slot for the Dot whose computer is to start, and
// says on the Dot (its Admitted condition, an Event when it begins to wait)
// whether it has one. A namespace without a cap admits every Dot, and an
// Admitted condition left from a cap is removed.
func (r *PowerReconciler) admit(ctx context.Context, dot *dotsv1.Dot, c *dotsv1.Computer, now time.Time) (bool, error) {
	a, err := TakeActiveSlot(ctx, r.Client, dot.Namespace, dot.Name)
	if err != nil {
		return false, err
	}
	h := patch.NewHelper(r.Client, patch.Writer{Name: PowerControllerName, Conditions: []string{dotsv1.AdmittedCondition}}, dot)
	was := meta.FindStatusCondition(dot.Status.Conditions, dotsv1.AdmittedCondition)
	switch {
	case a.Admitted && a.Cap == 0 && a.Active == 0 && was == nil:
		// No quota or no cap: nothing to say.
		return true, nil
	case a.Admitted:
		patch.SetCondition(dot, now, dotsv1.AdmittedCondition, metav1.ConditionTrue, dotsv1.AdmittedReason, "took an active slot of its namespace for its computer's last start")
	default:
		msg := lifecycle.WaitMessage(a, dot.Namespace)
		patch.SetCondition(dot, now, dotsv1.AdmittedCondition, metav1.ConditionFalse, dotsv1.ActiveDotsCapReason, msg)
		if was == nil || was.Status != metav1.ConditionFalse {
			r.Recorder.Eventf(dot, c, corev1.EventTypeWarning, dotsv1.ActiveDotsCapReason, "Start", "Computer %s is not started: %s", c.Name, msg)
		}
	}
	if _, err := h.Patch(ctx, dot); err != nil && !apierrors.IsConflict(err) {
		return a.Admitted, err
	}
	return a.Admitted, nil
}
