package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/patch"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// QuotaControllerName names the reconciler of a namespace's DotQuota.
const QuotaControllerName = "quota-controller"

// quotaWriter owns the DotQuota's conditions; the power controller writes
// its ledger (status.admitted) alone, owning none.
var quotaWriter = patch.Writer{Name: QuotaControllerName, Conditions: []string{dotsv1.ActiveDotsCapReachedCondition, dotsv1.SpendCapReachedCondition}}

// quotaSpendRefresh is how often the day's spend is summed again: spend
// events do not wake this controller.
const quotaSpendRefresh = 30 * time.Second

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dotquotas,verbs=get;list;watch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dotquotas/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks,verbs=get;list;watch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=approvals,verbs=get;list;watch;patch

// QuotaReconciler keeps a namespace's DotQuota status: the active Dots and
// the ledger of slots (a slot is given back once its Dot's computer is at
// rest, in the reconcile that gates it again, or once the Dot is gone), the day's spend, and the
// conditions. With an active-Dots cap, it gates every computer at rest
// (ActiveDotsGate), so that none starts without taking a slot first (the
// power controller's admission).
type QuotaReconciler struct {
	Client   client.Client
	Store    *store.Store
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	// Log wakes the quota of a Dot's namespace when the Dot's log has
	// new events (spend); without it the spend is summed every 30 s.
	Log *WorkLog
}

// SetupWithManager registers the reconciler: the quota, and the Dots and
// Computers of its namespace.
func (r *QuotaReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	toQuota := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: dotsv1.DotQuotaName}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).For(&dotsv1.DotQuota{}).
		Watches(&dotsv1.Computer{}, toQuota).
		Watches(&dotsv1.Dot{}, toQuota)
	if r.Log != nil {
		// New events in a Dot's log (its spend) sum its namespace's day
		// again.
		b = b.WatchesRawSource(r.Log.sourceWith(handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, d *dotsv1.Dot) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: dotsv1.DotQuotaName}}}
		})))
	}
	return b.Named(QuotaControllerName).Complete(r)
}

// Reconcile computes the quota's status and gates the computers at rest.
func (r *QuotaReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	q := &dotsv1.DotQuota{}
	if err := r.Client.Get(ctx, req.NamespacedName, q); err != nil || !q.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var computers dotsv1.ComputerList
	if err := r.Client.List(ctx, &computers, client.InNamespace(q.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	var dots dotsv1.DotList
	if err := r.Client.List(ctx, &dots, client.InNamespace(q.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	h := patch.NewHelper(r.Client, quotaWriter, q)
	capped := q.Spec.ActiveDots != nil
	byName := map[string]*dotsv1.Computer{}
	// released: the computers gated by this reconcile, whose slots are
	// given back. A computer gated already that holds a slot was admitted
	// and is about to start (its power controller removes the gate next):
	// it keeps its slot.
	released := map[string]bool{}
	var active int32
	for i := range computers.Items {
		c := &computers.Items[i]
		byName[c.Name] = c
		if !c.DeletionTimestamp.IsZero() {
			continue
		}
		if capped && !c.Gated(dotsv1.ActiveDotsGate) && lifecycle.AtRest(c) {
			// Gate it before its slot is given back: from now on it starts
			// only through an admission. Over the version read, so a start
			// asked for meanwhile is seen on the next look.
			gated := c.DeepCopy()
			gated.SetGate(dotsv1.ActiveDotsGate, true)
			if err := r.Client.Patch(ctx, gated, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
				return patch.RequeueOnConflict(ctrl.Result{}, err)
			}
			byName[c.Name] = gated
			released[c.Name] = true
			continue
		}
		if len(c.Spec.StartGates) == 0 && !lifecycle.AtRest(c) {
			active++
		}
	}
	if capped {
		dotExists := map[string]bool{}
		for _, d := range dots.Items {
			dotExists[d.Name] = d.DeletionTimestamp.IsZero()
		}
		var ledger []string
		for _, name := range q.Status.Admitted {
			c := byName[name]
			// A gated computer at rest that nothing asks to start holds no
			// slot either (a reconcile that gated it and stopped before
			// writing the ledger leaves one).
			if !dotExists[name] || c == nil || !c.DeletionTimestamp.IsZero() || released[name] ||
				(c.Gated(dotsv1.ActiveDotsGate) && lifecycle.AtRest(c) && !lifecycle.WantsStart(c)) {
				continue // released
			}
			ledger = append(ledger, name)
		}
		// A computer that runs without a slot (it ran before the cap was
		// set) holds one: a cap stops nothing already active.
		for name, c := range byName {
			if dotExists[name] && c.DeletionTimestamp.IsZero() && len(c.Spec.StartGates) == 0 && !lifecycle.AtRest(c) && !slices.Contains(ledger, name) {
				ledger = append(ledger, name)
			}
		}
		slices.Sort(ledger)
		q.Status.Admitted = ledger
	} else {
		q.Status.Admitted = nil
	}
	q.Status.ActiveDots = active
	if capped {
		q.Status.ActiveDots = max(active, int32(len(q.Status.Admitted)))
	}
	was := q.Status.SpendRequest.DeepCopy()
	after := r.spend(ctx, q, dots.Items, now)
	if err := r.spendQuestion(ctx, q, dots.Items, was); err != nil {
		return patch.RequeueOnConflict(ctrl.Result{}, err)
	}
	if capped && len(q.Status.Admitted) >= int(*q.Spec.ActiveDots) {
		patch.SetCondition(q, now, dotsv1.ActiveDotsCapReachedCondition, metav1.ConditionTrue, dotsv1.CapReachedReason,
			fmt.Sprintf("%d of %d active Dots: a Dot that is to start waits until another's computer stops", len(q.Status.Admitted), *q.Spec.ActiveDots))
	} else {
		patch.SetCondition(q, now, dotsv1.ActiveDotsCapReachedCondition, metav1.ConditionFalse, dotsv1.UnderCapReason, "")
	}
	q.Status.ObservedGeneration = q.Generation
	_, err := h.Patch(ctx, q)
	return patch.RequeueOnConflict(ctrl.Result{RequeueAfter: after}, err)
}

// spend sums the namespace's spend since the day began into the status and
// sets SpendCapReached. It returns when to look again: soon, and at the
// latest when the next day begins.
func (r *QuotaReconciler) spend(ctx context.Context, q *dotsv1.DotQuota, dots []dotsv1.Dot, now time.Time) time.Duration {
	loc, err := time.LoadLocation(q.Spec.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	day, start := lifecycle.Day(now, loc)
	var spent float64
	if r.Store != nil {
		for _, d := range dots {
			s, err := r.Store.SpentUSD(ctx, string(d.UID), wire.SpendEventTypes, start)
			if err != nil {
				return quotaSpendRefresh
			}
			spent += s
		}
	}
	q.Status.Day = day
	q.Status.SpentTodayUSD = strconv.FormatFloat(spent, 'f', 2, 64)
	s, err := lifecycle.DecideSpend(lifecycle.SpendFacts{Namespace: q.Namespace, Day: day, Spent: spent, PerDay: q.Spec.SpendPerDayUSD, Decision: q.Spec.SpendDecision})
	q.Status.ExtraTodayUSD = ""
	if s.Extra > 0 {
		q.Status.ExtraTodayUSD = strconv.FormatFloat(s.Extra, 'f', 2, 64)
	}
	was := q.Status.SpendRequest
	q.Status.SpendRequest = s.Request
	switch {
	case err != nil:
		patch.SetCondition(q, now, dotsv1.SpendCapReachedCondition, metav1.ConditionUnknown, "InvalidCap", err.Error())
	case s.Rejected:
		patch.SetCondition(q, now, dotsv1.SpendCapReachedCondition, metav1.ConditionTrue, dotsv1.SpendRejectedReason,
			lifecycle.SpendRejectedError(q.Namespace, s)+": held tasks fail, messages wait for the next day")
	case s.Reached:
		patch.SetCondition(q, now, dotsv1.SpendCapReachedCondition, metav1.ConditionTrue, dotsv1.CapReachedReason,
			s.Request.Message+" No new task or message is delivered until 'invisible-dots quota approve' (or the next day)")
		if r.Recorder != nil && (was == nil || was.Day != day || was.Phase != dotsv1.SpendRequestPending) {
			r.Recorder.Eventf(q, nil, corev1.EventTypeWarning, "SpendCapReached", "Hold", "%s", s.Request.Message)
		}
	default:
		patch.SetCondition(q, now, dotsv1.SpendCapReachedCondition, metav1.ConditionFalse, dotsv1.UnderCapReason, "")
	}
	next := start.AddDate(0, 0, 1).Sub(now)
	return min(next, quotaSpendRefresh)
}

// namespaceQuota reads the namespace's DotQuota: nil when it has none.
func namespaceQuota(ctx context.Context, c client.Reader, namespace string) (*dotsv1.DotQuota, error) {
	q := &dotsv1.DotQuota{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: dotsv1.DotQuotaName}, q); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return q, nil
}

// TakeActiveSlot takes (or finds) an active slot for the Dot dot in its
// namespace's DotQuota, as a ResourceQuota's usage is charged: the ledger
// (status.admitted) is written over the version read, and a Conflict reads
// the quota again and decides again. Two Dots taking the last slot at once
// cannot both have it. Without a quota or a cap, every Dot is admitted.
func TakeActiveSlot(ctx context.Context, c client.Client, namespace, dot string) (lifecycle.Admission, error) {
	for attempt := 0; ; attempt++ {
		q, err := namespaceQuota(ctx, c, namespace)
		if err != nil || q == nil {
			return lifecycle.Admission{Admitted: true}, err
		}
		a := lifecycle.Admit(q.Status.Admitted, q.Spec.ActiveDots, dot)
		if !a.Write {
			return a, nil
		}
		h := patch.NewHelper(c, patch.Writer{Name: PowerControllerName}, q)
		q.Status.Admitted = a.Ledger
		if _, err := h.Patch(ctx, q); err == nil || !apierrors.IsConflict(err) || attempt >= 20 {
			return a, err
		}
		// Lost the race: someone else changed the ledger; read it again.
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 10 * time.Millisecond):
		}
	}
}
