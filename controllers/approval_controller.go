package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// ApprovalControllerName names the Approval reconciler.
const ApprovalControllerName = "approval-controller"

// ApprovalReconciler records a person's decision: the phase follows
// spec.decision (which the API server keeps from changing once set) and
// decidedAt is when the control plane first saw it. Delivering the decision
// to the guest is the deliverer's, a later concern.
type ApprovalReconciler struct {
	Client   client.Client
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=approvals,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=approvals/status,verbs=get;update;patch

// SetupWithManager registers the reconciler.
func (r *ApprovalReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Approval{}).
		Named(ApprovalControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrentReconciles}).
		Complete(r)
}

// Reconcile binds the Approval to its Dot and records the decision.
func (r *ApprovalReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := &dotsv1.Approval{}
	if err := r.Client.Get(ctx, req.NamespacedName, a); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !a.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := a.DeepCopy()
	now := r.Clock.Now()
	if err := bindToDot(ctx, r.Client, a, a.Spec.DotName, &a.Status.Conditions, metav1.NewTime(now)); err != nil {
		return ctrl.Result{}, err
	}
	before.ObjectMeta = a.ObjectMeta
	phase := approvalPhase(a.Spec.Decision)
	if phase != a.Status.Phase {
		if phase != dotsv1.ApprovalPending && a.Status.DecidedAt == nil {
			t := metav1.NewTime(now)
			a.Status.DecidedAt = &t
			r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, string(phase), "Decide", "%s %s for Dot %s", phase, a.Spec.Tool, a.Spec.DotName)
		}
		a.Status.Phase = phase
	}
	a.Status.ObservedGeneration = a.Generation
	if err := r.Client.Status().Patch(ctx, a, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// approvalPhase is the phase a decision leads to. Expired is set by whoever
// expires approvals, never from the decision.
func approvalPhase(d dotsv1.ApprovalDecision) dotsv1.ApprovalPhase {
	switch d {
	case dotsv1.Approve:
		return dotsv1.ApprovalApproved
	case dotsv1.Reject:
		return dotsv1.ApprovalRejected
	default:
		return dotsv1.ApprovalPending
	}
}
