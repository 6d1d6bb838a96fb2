package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// UnhostedComputerControllerName names the reconciler that runs when this
// control plane has no host agent.
const UnhostedComputerControllerName = "computer-unhosted"

// DotLabel is set on the objects made for a Dot, with the Dot's name.
const DotLabel = "dots.invisible.dev/dot"

// UnhostedComputerReconciler is what reconciles Computers when no host agent
// runs in this control plane (a server started with --kubeconfig on a
// machine that runs no VMs): it says so on each Computer, which stays
// PROVISIONING. That is the truth, not a placeholder: nothing here can make
// the VM.
type UnhostedComputerReconciler struct {
	Client client.Client
	Clock  clock.PassiveClock
}

// SetupWithManager registers the reconciler.
func (r *UnhostedComputerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Computer{}).
		Named(UnhostedComputerControllerName).
		Complete(r)
}

// Reconcile records PROVISIONING and why.
func (r *UnhostedComputerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := c.DeepCopy()
	now := r.Clock.Now()
	msg := "no host agent runs in this control plane, so no host has taken this Computer"
	c.Status.State = dotsv1.ComputerProvisioning
	setCondition(&c.Status.Conditions, c.Generation, now, dotsv1.ProvisionedCondition, metav1.ConditionFalse, dotsv1.NoHostAgentReason, msg)
	setCondition(&c.Status.Conditions, c.Generation, now, dotsv1.ReadyCondition, metav1.ConditionFalse, dotsv1.NoHostAgentReason, msg)
	c.Status.ObservedGeneration = c.Generation
	if err := r.Client.Status().Patch(ctx, c, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}
