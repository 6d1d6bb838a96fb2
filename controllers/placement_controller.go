package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// PlacementControllerName names the placement reconciler.
const PlacementControllerName = "placement-controller"

// NodeNameField indexes Computers by spec.nodeName in the central cache.
const NodeNameField = "spec.nodeName"

// placementWriter owns Placed, and Ready while no host has the Computer (a
// host agent owns Ready from the placement on).
var placementWriter = patch.Writer{Name: PlacementControllerName, Conditions: []string{dotsv1.PlacedCondition, dotsv1.ReadyCondition}}

// PlacementReconciler gives each new Computer its host (spec.nodeName) and
// says why when no host can take it. A placed Computer never moves: its
// disk lives on its host.
type PlacementReconciler struct {
	Client   client.Client
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=hosts,verbs=get;list;watch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers/status,verbs=get;update;patch

// SetupWithManager registers the reconciler: it looks at Computers not yet
// placed (or whose Placed condition is not written yet), and at all of them
// again when a Host changes.
func (r *PlacementReconciler) SetupWithManager(mgr ctrl.Manager) error {
	unplaced := predicate.NewPredicateFuncs(func(o client.Object) bool {
		c, ok := o.(*dotsv1.Computer)
		return ok && needsPlacement(c)
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Computer{}, builder.WithPredicates(unplaced)).
		Watches(&dotsv1.Host{}, handler.EnqueueRequestsFromMapFunc(r.unplacedComputers),
			builder.WithPredicates(predicate.Funcs{
				// A Host's status decides placement; its Lease renewals
				// are not Host writes, so this is quiet in a steady state.
				UpdateFunc: func(e event.UpdateEvent) bool {
					return e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion()
				},
			})).
		Named(PlacementControllerName).
		// One at a time: each decision counts the ones before it.
		Complete(r)
}

// needsPlacement: no host yet, or the Placed condition does not say the
// host it has.
func needsPlacement(c *dotsv1.Computer) bool {
	if c.Spec.NodeName == "" {
		return true
	}
	p := meta.FindStatusCondition(c.Status.Conditions, dotsv1.PlacedCondition)
	return p == nil || p.Status != metav1.ConditionTrue
}

func (r *PlacementReconciler) unplacedComputers(ctx context.Context, _ client.Object) []reconcile.Request {
	var list dotsv1.ComputerList
	if err := r.Client.List(ctx, &list, client.MatchingFields{NodeNameField: ""}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return out
}

// Reconcile places one Computer, or records why it cannot be placed.
func (r *PlacementReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, c)
	}
	helper := patch.NewHelper(r.Client, placementWriter, c)
	now := r.Clock.Now()
	if c.Spec.NodeName != "" {
		patch.SetCondition(c, now, dotsv1.PlacedCondition, metav1.ConditionTrue, dotsv1.PlacedReason, "on host "+c.Spec.NodeName)
		_, err := helper.Patch(ctx, c)
		return patch.RequeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
	}

	hosts, err := r.hostFacts(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	p := decidePlacement(requestOf(c), hosts)
	if p.Host != "" {
		placed := c.DeepCopy()
		placed.Spec.NodeName = p.Host
		// Over the version read: a Computer placed meanwhile keeps its host.
		if err := r.Client.Patch(ctx, placed, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
			return patch.RequeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
		}
		r.Recorder.Eventf(placed, nil, corev1.EventTypeNormal, "Placed", "Place", "placed on host %s", p.Host)
		return ctrl.Result{}, nil // the patch's event writes Placed
	}
	if c.Status.State == "" {
		c.Status.State = dotsv1.ComputerProvisioning
	}
	patch.SetCondition(c, now, dotsv1.PlacedCondition, metav1.ConditionFalse, dotsv1.NoHostFitsReason, p.Why)
	patch.SetCondition(c, now, dotsv1.ReadyCondition, metav1.ConditionFalse, dotsv1.NoHostFitsReason, p.Why)
	c.Status.ObservedGeneration = c.Generation
	written, err := helper.Patch(ctx, c)
	if err != nil {
		return patch.RequeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
	}
	if written {
		// Only when the reason changed: a Computer that waits makes one
		// Event, not one per look.
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, dotsv1.NoHostFitsReason, "Place", "%s", p.Why)
	}
	return ctrl.Result{}, nil
}

// reconcileDelete lets a Computer go that no host has: nothing was made for
// it anywhere. One that ran before hosts were recorded (no nodeName, but a
// boot id or pid in status) keeps its finalizer until it is placed on the
// host that ran it, whose agent destroys its VM.
func (r *PlacementReconciler) reconcileDelete(ctx context.Context, c *dotsv1.Computer) error {
	if c.Spec.NodeName != "" || c.Status.HostBootID != "" || c.Status.PID != 0 {
		return nil
	}
	return patch.RemoveFinalizer(ctx, r.Client, c, dotsv1.ComputerFinalizer)
}

// requestOf is what a Computer needs of a host.
func requestOf(c *dotsv1.Computer) placementRequest {
	cpus, mem := c.Shape()
	return placementRequest{
		CPU: cpus, MemoryBytes: mem, DiskBytes: c.Spec.Disk.Value(),
		GoldenImage: c.Spec.GoldenImage, RuntimeImage: c.Spec.RuntimeImage,
	}
}

// hostFacts reads every Host and the Computers placed on it.
func (r *PlacementReconciler) hostFacts(ctx context.Context) ([]hostFacts, error) {
	var hosts dotsv1.HostList
	if err := r.Client.List(ctx, &hosts); err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	out := make([]hostFacts, 0, len(hosts.Items))
	for _, h := range hosts.Items {
		f := hostFacts{
			Name:          h.Name,
			Unschedulable: h.Spec.Unschedulable,
			Images:        h.Status.Images,
			Allocatable: resources{
				CPU:         h.Status.Allocatable.CPU,
				MemoryBytes: h.Status.Allocatable.Memory.Value(),
				DiskBytes:   h.Status.Allocatable.Disk.Value(),
			},
		}
		if ready := meta.FindStatusCondition(h.Status.Conditions, dotsv1.ReadyCondition); ready != nil {
			f.Ready = ready.Status == metav1.ConditionTrue
			f.NotReadyWhy = ready.Message
		}
		if !h.DeletionTimestamp.IsZero() {
			f.Ready, f.NotReadyWhy = false, "it is being deleted"
		}
		// Read only: the cache's objects, not a copy of each.
		var placed dotsv1.ComputerList
		if err := r.Client.List(ctx, &placed, client.MatchingFields{NodeNameField: h.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list the computers of host %s: %w", h.Name, err)
		}
		f.Computers = len(placed.Items)
		for _, c := range placed.Items {
			switch c.Status.State {
			case dotsv1.ComputerStarting, dotsv1.ComputerRunning, dotsv1.ComputerStopping:
				f.RunningMemoryBytes += requestOf(&c).MemoryBytes
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// IndexNodeName registers the spec.nodeName index of Computers on a
// manager's cache.
func IndexNodeName(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &dotsv1.Computer{}, NodeNameField, func(o client.Object) []string {
		return []string{o.(*dotsv1.Computer).Spec.NodeName}
	})
}
