package controllers

import (
	"context"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// WebhookControllerName names the Webhook reconciler.
const WebhookControllerName = "webhook-controller"

// WebhookReconciler binds each Webhook to its Dot, as Tasks and Approvals
// are: the Dot becomes its controlling owner (deleting the Dot deletes it,
// and its Secret with it), and its DotBound condition says so, or that the
// Dot is missing. A Webhook made by the command line has its owner already;
// one applied with kubectl gets it here. The deliveries are the listener's
// (internal/hooks), which writes the counts and owns no condition.
type WebhookReconciler struct {
	Client client.Client
	Clock  clock.PassiveClock
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=webhooks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=webhooks/status,verbs=get;update;patch

// SetupWithManager registers the reconciler.
func (r *WebhookReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Webhook{}).
		Named(WebhookControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrentReconciles}).
		Complete(r)
}

// webhookWriter owns the binding.
var webhookWriter = patch.Writer{Name: WebhookControllerName, Conditions: []string{dotsv1.DotBoundCondition}}

// Reconcile binds the Webhook to its Dot.
func (r *WebhookReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	wh := &dotsv1.Webhook{}
	if err := r.Client.Get(ctx, req.NamespacedName, wh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !wh.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	helper := patch.NewHelper(r.Client, webhookWriter, wh)
	if patched, err := bindToDot(ctx, r.Client, wh, wh.Spec.DotName, r.Clock.Now()); patched || err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	_, err := helper.Patch(ctx, wh)
	return patch.RequeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
}
