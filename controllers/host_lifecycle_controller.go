package controllers

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// HostLifecycleControllerName names the host lifecycle reconciler.
const HostLifecycleControllerName = "host-lifecycle-controller"

// hostLifecycleWriter stands in for an unreachable host agent: it turns the
// Ready conditions the agent wrote Unknown. The agent writes them again when
// it comes back.
var hostLifecycleWriter = patch.Writer{Name: HostLifecycleControllerName, Conditions: []string{dotsv1.ReadyCondition}}

// HostLifecycleReconciler watches each host's Lease (Kubernetes' node
// lifecycle controller, for Hosts): a host whose agent stopped renewing it
// is Unknown, and so is every Computer on it. Nothing is moved or deleted. A
// Computer being deleted whose Host was deleted (a person saying the
// machine is gone for good) is let go, with an Event saying its disk was not
// cleaned.
type HostLifecycleReconciler struct {
	Client   client.Client
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	// LeaseDuration is how long a Lease holds without a renewal;
	// dotsv1.HostLeaseDuration seconds when zero.
	LeaseDuration time.Duration
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=hosts,verbs=get;list;watch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=hosts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers/finalizers,verbs=update
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch

// SetupWithManager registers the reconciler, keyed by host name: a Host,
// its Lease, and the Computers on it all wake it.
func (r *HostLifecycleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.LeaseDuration == 0 {
		r.LeaseDuration = dotsv1.HostLeaseDuration * time.Second
	}
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetName()}}}
	})
	hostLeases := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == dotsv1.SystemNamespace })
	computersOfHost := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		c := o.(*dotsv1.Computer)
		if c.Spec.NodeName == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: c.Spec.NodeName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Host{}).
		Watches(&coordinationv1.Lease{}, byName, builder.WithPredicates(hostLeases)).
		Watches(&dotsv1.Computer{}, computersOfHost).
		Named(HostLifecycleControllerName).
		Complete(r)
}

// Reconcile looks at one host's Lease.
func (r *HostLifecycleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	name := req.Name
	host := &dotsv1.Host{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, host)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, r.releaseComputers(ctx, name)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	lease := &coordinationv1.Lease{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: name}, lease)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	renewed, left := r.leaseLeft(lease, err == nil, now)
	if left > 0 {
		// Looked at again when it would lapse; a renewal wakes it sooner.
		return ctrl.Result{RequeueAfter: left + time.Second}, nil
	}
	why := fmt.Sprintf("the agent of host %s has not renewed its Lease for %s", name, r.LeaseDuration)
	if !renewed.IsZero() {
		why += " (last renewed " + renewed.UTC().Format(time.RFC3339) + ")"
	}
	why += "; nothing on it is moved or deleted, and it recovers when the agent is back (kubectl delete host " + name + " if the machine is gone for good)"
	if err := r.markUnknown(ctx, host, now, why); err != nil {
		return patch.RequeueOnConflict(ctrl.Result{}, err)
	}
	var list dotsv1.ComputerList
	if err := r.Client.List(ctx, &list, client.MatchingFields{NodeNameField: name}); err != nil {
		return ctrl.Result{}, err
	}
	for i := range list.Items {
		if err := r.markUnknown(ctx, &list.Items[i], now, why); err != nil {
			return patch.RequeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
		}
	}
	return ctrl.Result{}, nil
}

// leaseLeft is when the Lease was last renewed and how long it still holds
// (zero or less: lapsed; a missing Lease has lapsed).
func (r *HostLifecycleReconciler) leaseLeft(l *coordinationv1.Lease, found bool, now time.Time) (time.Time, time.Duration) {
	if !found || l.Spec.RenewTime == nil {
		return time.Time{}, 0
	}
	d := r.LeaseDuration
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	renewed := l.Spec.RenewTime.Time
	return renewed, renewed.Add(d).Sub(now)
}

// markUnknown sets obj's Ready Unknown (HostUnreachable), once.
func (r *HostLifecycleReconciler) markUnknown(ctx context.Context, obj patch.Object, now time.Time, why string) error {
	if c := meta.FindStatusCondition(obj.GetConditions(), dotsv1.ReadyCondition); c != nil && c.Status == metav1.ConditionUnknown && c.Reason == dotsv1.HostUnreachableReason {
		return nil
	}
	helper := patch.NewHelper(r.Client, hostLifecycleWriter, obj)
	patch.SetCondition(obj, now, dotsv1.ReadyCondition, metav1.ConditionUnknown, dotsv1.HostUnreachableReason, why)
	written, err := helper.Patch(ctx, obj)
	if written {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, dotsv1.HostUnreachableReason, "Heartbeat", "%s", why)
	}
	return err
}

// releaseComputers lets go the Computers being deleted whose Host no longer
// exists: a person deleted the Host to say its machine is gone, so no agent
// will ever destroy their VMs. Their disks stay where they were; the Event
// says so.
func (r *HostLifecycleReconciler) releaseComputers(ctx context.Context, host string) error {
	var list dotsv1.ComputerList
	if err := r.Client.List(ctx, &list, client.MatchingFields{NodeNameField: host}); err != nil {
		return err
	}
	now := r.Clock.Now()
	for i := range list.Items {
		c := &list.Items[i]
		if c.DeletionTimestamp.IsZero() {
			// Pinned to a host that has not joined (or was deleted).
			why := fmt.Sprintf("no Host %s is registered: start its agent (invisible-dots agent --host %s), or on this machine invisible-dots server", host, host)
			if err := r.markUnknown(ctx, c, now, why); err != nil {
				return client.IgnoreNotFound(err)
			}
			continue
		}
		if err := patch.RemoveFinalizer(ctx, r.Client, c, dotsv1.ComputerFinalizer); err != nil {
			return err
		}
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "DiskNotCleaned", "Delete",
			"Host %s was deleted, so no agent can destroy this Computer's VM: its disk and files stay on that machine under vms/%s/%s", host, c.Namespace, c.Name)
	}
	return nil
}
