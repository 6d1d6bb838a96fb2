package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/patch"
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

// approvalWriter owns the binding; phase and decidedAt are its fields.
var approvalWriter = patch.Writer{Name: ApprovalControllerName, Conditions: []string{dotsv1.DotBoundCondition}}

// Reconcile binds the Approval to its Dot and records the decision.
func (r *ApprovalReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := &dotsv1.Approval{}
	if err := r.Client.Get(ctx, req.NamespacedName, a); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !a.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	helper := patch.NewHelper(r.Client, approvalWriter, a)
	now := r.Clock.Now()
	if patched, err := bindToDot(ctx, r.Client, a, a.Spec.DotName, now); patched || err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	phase := approvalPhase(a.Spec.Decision)
	switch {
	case phase == dotsv1.ApprovalPending && a.Status.Phase == dotsv1.ApprovalExpired:
		phase = dotsv1.ApprovalExpired // its task ended without a decision
	case phase == dotsv1.ApprovalPending && a.Status.Phase == "" && a.Spec.RequestID != "":
		// A guest's request: the approval request reconciler writes its
		// first phase, Pending or, when its task had ended already,
		// Expired, so an Approval that never waited is never seen Pending.
		phase = ""
	}
	decided := phase != a.Status.Phase && phase != dotsv1.ApprovalPending && a.Status.DecidedAt == nil
	if decided {
		a.Status.DecidedAt = ptr.To(metav1.NewTime(now))
	}
	a.Status.Phase = phase
	a.Status.ObservedGeneration = a.Generation
	written, err := helper.Patch(ctx, a)
	if err != nil {
		return patch.RequeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
	}
	if written && decided {
		r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, string(phase), "Decide", "%s %s for Dot %s", phase, a.Spec.Tool, a.Spec.DotName)
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
