package controllers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

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
	before := c.DeepCopy()
	now := r.Clock.Now()
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, c, before, now)
	}
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

// reconcileDelete lets a Computer go that no host ever started (no boot, no
// pid: there is no VM and no file to destroy). One that a host agent ran
// keeps its finalizer: only a host agent can destroy its VM and disk, and
// removing the finalizer here would leave them behind unseen. It says so.
func (r *UnhostedComputerReconciler) reconcileDelete(ctx context.Context, c, before *dotsv1.Computer, now time.Time) error {
	if !controllerutil.ContainsFinalizer(c, ComputerFinalizer) {
		return nil
	}
	if c.Status.HostBootID == "" && c.Status.PID == 0 {
		controllerutil.RemoveFinalizer(c, ComputerFinalizer)
		return client.IgnoreNotFound(r.Client.Patch(ctx, c, client.MergeFrom(before)))
	}
	msg := "waiting for a host agent to destroy this Computer's VM and disk: start invisible-dots server on the host that ran it (no host agent runs in this control plane)"
	c.Status.State = dotsv1.ComputerDeleting
	setCondition(&c.Status.Conditions, c.Generation, now, dotsv1.ReadyCondition, metav1.ConditionFalse, dotsv1.NoHostAgentReason, msg)
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, c, client.MergeFrom(before)))
}
