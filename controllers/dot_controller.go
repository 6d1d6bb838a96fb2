package controllers

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// DotControllerName names the Dot reconciler in logs and Events.
const DotControllerName = "dot-controller"

// dotWriter owns the Dot's computer conditions and the Ready summary; the
// host agent's guest link owns KeyPushed, ConfigApplied and AgentReady.
var dotWriter = patch.Writer{Name: DotControllerName, Conditions: []string{dotsv1.ReadyCondition, dotsv1.ComputerReadyCondition}}

// DotReconciler keeps each Dot's Computer in step with spec.computer and
// reflects the Computer's state in the Dot's status.
type DotReconciler struct {
	Client   client.Client
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	// SecretReader reads the Dot's Secret uncached (pruneMCPSecrets); nil
	// leaves the Secret alone.
	SecretReader client.Reader

	// written is, per Dot, the resourceVersion the cache held when this
	// reconciler last wrote the Dot's status (see staleSinceWrite).
	written sync.Map
}

// staleCacheRetry is how soon a reconcile that found the cache older than
// its own last write runs again, should the write's own event not wake it
// first (it does: the write changed the Dot).
const staleCacheRetry = time.Second

// staleSinceWrite reports whether the cache still holds the Dot as it was
// before this reconciler's last status write. A new Dot's Computer wakes
// its second reconcile within milliseconds of the first's status write,
// before the cache has that write: the status computed from the old Dot
// could only be refused (409) and computed again. Measured over 100 Dots
// made one after another: 68 and 86 such refused writes in two runs, each a
// full patch's work for the API server.
func (r *DotReconciler) staleSinceWrite(dot *dotsv1.Dot) bool {
	key := client.ObjectKeyFromObject(dot)
	before, ok := r.written.Load(key)
	if !ok {
		return false
	}
	if before == dot.ResourceVersion {
		return true
	}
	r.written.Delete(key)
	return false
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dots,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dots/status;dots/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: it watches Dots and the
// Computers they own.
func (r *DotReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Dot{}).
		Owns(&dotsv1.Computer{}).
		Named(DotControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrentReconciles}).
		Complete(r)
}

// dotScope carries what the phases found to updateStatus.
type dotScope struct {
	dot      *dotsv1.Dot
	computer *dotsv1.Computer // nil when there is none (yet)
	conflict string           // why the Computer is not ours, if it is not
}

// Reconcile: get, ensure the finalizer, then run the phases, and patch the
// status once at the end from what they found.
func (r *DotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	dot := &dotsv1.Dot{}
	if err := r.Client.Get(ctx, req.NamespacedName, dot); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.staleSinceWrite(dot) {
		return ctrl.Result{RequeueAfter: staleCacheRetry}, nil
	}
	// The embedded API server sets the finalizer as the Dot is made
	// (internal/admitfinalizer); another cluster's Dot gets it here.
	if added, err := patch.EnsureFinalizer(ctx, r.Client, dot, dotsv1.DotFinalizer); added || err != nil {
		return ctrl.Result{}, err
	}

	helper := patch.NewHelper(r.Client, dotWriter, dot)
	s := &dotScope{dot: dot}
	defer func() {
		if !dot.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(dot, dotsv1.DotFinalizer) {
			return // gone with the finalizer's removal
		}
		r.updateStatus(s, reterr == nil)
		read := dot.ResourceVersion
		wrote, err := helper.Patch(ctx, dot)
		if wrote && dot.ResourceVersion != read {
			// A write the server made a no-op keeps the version: the
			// cache would never move past it, so it is not remembered.
			r.written.Store(client.ObjectKeyFromObject(dot), read)
		}
		switch {
		case apierrors.IsConflict(err):
			res, reterr = ctrl.Result{RequeueAfter: patch.ConflictRetry}, nil
		case err != nil && !apierrors.IsNotFound(err):
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !dot.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	_, pruneErr := r.pruneMCPSecrets(ctx, dot)
	return ctrl.Result{}, kerrors.NewAggregate([]error{r.reconcileComputer(ctx, s), pruneErr})
}

// reconcileComputer creates the Dot's Computer (same name, owned by the
// Dot) or brings its size in line with spec.computer. The run strategy and
// images are the Computer's own and are left alone.
func (r *DotReconciler) reconcileComputer(ctx context.Context, s *dotScope) error {
	dot := s.dot
	computer := &dotsv1.Computer{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(dot), computer)
	switch {
	case apierrors.IsNotFound(err):
		computer = &dotsv1.Computer{
			ObjectMeta: metav1.ObjectMeta{Name: dot.Name, Namespace: dot.Namespace, Labels: map[string]string{dotsv1.DotLabel: dot.Name}},
			Spec: dotsv1.ComputerSpec{
				CPU:         dot.Spec.Computer.CPU,
				Memory:      quantityOr(dot.Spec.Computer.Memory, protocol.Bounds.MemoryGiB.Default),
				Disk:        quantityOr(dot.Spec.Computer.Disk, protocol.Bounds.DiskGiB.Default),
				RunStrategy: dotsv1.RunOnDemand,
				// A pinned host is the placement; otherwise placement
				// chooses one.
				NodeName: dot.Spec.Computer.Host,
			},
		}
		// In a namespace with an active-Dots cap, a new computer starts
		// only once its Dot takes a slot (the power controller's
		// admission): it is made gated.
		if q, err := namespaceQuota(ctx, r.Client, dot.Namespace); err != nil {
			return err
		} else if q != nil && q.Spec.ActiveDots != nil {
			computer.SetGate(dotsv1.ActiveDotsGate, true)
		}
		if err := controllerutil.SetControllerReference(dot, computer, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, computer); err != nil {
			return fmt.Errorf("create the Computer: %w", err)
		}
		r.Recorder.Eventf(dot, computer, corev1.EventTypeNormal, "ComputerCreated", "Create", "Created Computer %s", computer.Name)
		s.computer = computer
		return nil
	case err != nil:
		return err
	}
	if !metav1.IsControlledBy(computer, dot) {
		s.conflict = fmt.Sprintf("a Computer named %s exists that this Dot does not own; delete it or rename the Dot", computer.Name)
		s.computer = computer
		return nil
	}
	s.computer = computer
	if pin := dot.Spec.Computer.Host; pin != "" && computer.Spec.NodeName != "" && pin != computer.Spec.NodeName && dot.Generation != dot.Status.ObservedGeneration {
		// A computer never moves: its disk lives on its host.
		r.Recorder.Eventf(dot, computer, corev1.EventTypeWarning, "HostPinIgnored", "Place",
			"spec.computer.host says %s, but Computer %s is on host %s and never moves (its disk lives there); delete the Dot to make its computer anew on %s", pin, computer.Name, computer.Spec.NodeName, pin)
	}
	want := computer.DeepCopy()
	want.Spec.CPU = dot.Spec.Computer.CPU
	want.Spec.Memory = quantityOr(dot.Spec.Computer.Memory, protocol.Bounds.MemoryGiB.Default)
	want.Spec.Disk = quantityOr(dot.Spec.Computer.Disk, protocol.Bounds.DiskGiB.Default)
	if want.Spec.CPU != computer.Spec.CPU || want.Spec.Memory.Cmp(computer.Spec.Memory) != 0 || want.Spec.Disk.Cmp(computer.Spec.Disk) != 0 {
		if err := r.Client.Patch(ctx, want, client.MergeFrom(computer)); err != nil {
			return fmt.Errorf("resize the Computer: %w", err)
		}
		r.Recorder.Eventf(dot, want, corev1.EventTypeNormal, "ComputerResized", "Update", "Computer %s: %d CPUs, %s memory, %s disk", want.Name, want.Spec.CPU, want.Spec.Memory.String(), want.Spec.Disk.String())
		s.computer = want
	}
	return nil
}

// reconcileDelete deletes the Computer and removes the finalizer only once
// the Computer is gone: its own finalizer holds it until the VM and its
// files are destroyed.
func (r *DotReconciler) reconcileDelete(ctx context.Context, s *dotScope) (ctrl.Result, error) {
	dot := s.dot
	computer := &dotsv1.Computer{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(dot), computer)
	if err == nil && metav1.IsControlledBy(computer, dot) {
		s.computer = computer
		if computer.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, computer, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("delete the Computer: %w", err)
			}
			r.Recorder.Eventf(dot, computer, corev1.EventTypeNormal, "ComputerDeleting", "Delete", "Deleting Computer %s", computer.Name)
		}
		// The Computer's deletion wakes this reconciler through Owns; poll
		// too, in case its finalizer takes a while.
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	s.computer = nil
	return ctrl.Result{}, patch.RemoveFinalizer(ctx, r.Client, dot, dotsv1.DotFinalizer)
}

// updateStatus sets phase, computerState, error and conditions from the
// scope: the one writer of the Dot's phase (dotPhase). The activity status
// reconciler writes the work fields the phase reads (currentTask,
// pendingApprovals); the guest link the READY procedure's conditions.
func (r *DotReconciler) updateStatus(s *dotScope, reconciled bool) {
	dot := s.dot
	now := r.Clock.Now()
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		patch.SetCondition(dot, now, typ, status, reason, msg)
	}

	computerReady := false
	switch {
	case !dot.DeletionTimestamp.IsZero():
		set(dotsv1.ComputerReadyCondition, metav1.ConditionFalse, dotsv1.DeletingReason, "the Dot is being deleted")
	case s.conflict != "":
		set(dotsv1.ComputerReadyCondition, metav1.ConditionFalse, dotsv1.ComputerConflictReason, s.conflict)
	case s.computer == nil:
		set(dotsv1.ComputerReadyCondition, metav1.ConditionFalse, dotsv1.ComputerCreatedReason, "the Computer is being created")
	default:
		c := meta.FindStatusCondition(s.computer.Status.Conditions, dotsv1.ReadyCondition)
		switch {
		case c != nil && c.Status == metav1.ConditionTrue:
			computerReady = true
			set(dotsv1.ComputerReadyCondition, metav1.ConditionTrue, dotsv1.ComputerRunningReason, "the Computer runs and its guest answers")
		case c != nil && c.Status == metav1.ConditionUnknown:
			// Its host is out of reach: what the Computer does is unknown.
			set(dotsv1.ComputerReadyCondition, metav1.ConditionUnknown, c.Reason, fmt.Sprintf("Computer %s: %s", s.computer.Name, c.Message))
		case c != nil:
			set(dotsv1.ComputerReadyCondition, metav1.ConditionFalse, dotsv1.ComputerNotRunningReason, fmt.Sprintf("Computer %s: %s", s.computer.Name, c.Message))
		default:
			set(dotsv1.ComputerReadyCondition, metav1.ConditionFalse, dotsv1.ComputerCreatedReason, fmt.Sprintf("Computer %s has reported no state yet", s.computer.Name))
		}
	}
	if s.computer != nil && s.conflict == "" {
		dot.Status.ComputerState = s.computer.Status.State
	} else {
		dot.Status.ComputerState = ""
	}

	guestReady, guestMissing := guestReady(dot)
	dot.Status.Phase = dotPhase(phaseFacts{
		conflict: s.conflict != "", computer: s.computer, computerReady: computerReady, guestReady: guestReady,
		currentTask: dot.Status.CurrentTask, pendingApprovals: dot.Status.PendingApprovals, last: dot.Status.Phase,
	})
	if dot.Status.Phase == dotsv1.DotError {
		dot.Status.Error = cmp.Or(s.conflict, computerError(s.computer))
	} else {
		dot.Status.Error = ""
	}

	cr := meta.FindStatusCondition(dot.Status.Conditions, dotsv1.ComputerReadyCondition)
	switch {
	case computerReady && guestReady:
		set(dotsv1.ReadyCondition, metav1.ConditionTrue, dotsv1.ReadyReason, "the Dot's computer runs, its key and configuration reached the guest, and its engine is ready")
	case computerReady:
		set(dotsv1.ReadyCondition, metav1.ConditionFalse, dotsv1.NotReadyReason, "the computer runs; waiting for "+guestMissing)
	case cr != nil && cr.Status == metav1.ConditionUnknown:
		set(dotsv1.ReadyCondition, metav1.ConditionUnknown, cr.Reason, cr.Message)
	default:
		msg := "the Dot's computer is not ready"
		if cr != nil {
			msg = cr.Message
		}
		set(dotsv1.ReadyCondition, metav1.ConditionFalse, dotsv1.NotReadyReason, msg)
	}
	if reconciled {
		dot.Status.ObservedGeneration = dot.Generation
	}
}

// guestSteps are the READY procedure's conditions, in its order, written by
// the guest link of the Computer's host agent.
var guestSteps = []string{dotsv1.KeyPushedCondition, dotsv1.ConfigAppliedCondition, dotsv1.AgentReadyCondition}

// guestReady reports whether the READY procedure completed (ref 9.3: the key
// pushed, the configuration applied, the engine's own health ok), and when
// not, the first step that does not hold and why.
func guestReady(dot *dotsv1.Dot) (bool, string) {
	for _, typ := range guestSteps {
		c := meta.FindStatusCondition(dot.Status.Conditions, typ)
		switch {
		case c == nil:
			return false, typ + " (not reported yet by the host agent's guest link)"
		case c.Status != metav1.ConditionTrue:
			return false, typ + " (" + c.Message + ")"
		}
	}
	return true, ""
}

func computerError(c *dotsv1.Computer) string {
	if c == nil {
		return ""
	}
	if c.Status.StartFailure != nil && c.Status.StartFailure.Message != "" {
		return c.Status.StartFailure.Message
	}
	if r := meta.FindStatusCondition(c.Status.Conditions, dotsv1.ReadyCondition); r != nil {
		return r.Message
	}
	return "the Computer is in state " + string(c.Status.State)
}

// quantityOr is q, or defaultGiB when the API server has not defaulted it
// (it always does for a stored Dot; this keeps a nil from panicking).
func quantityOr(q *resource.Quantity, defaultGiB int) resource.Quantity {
	if q != nil {
		return q.DeepCopy()
	}
	return *resource.NewQuantity(int64(defaultGiB)<<30, resource.BinarySI)
}

func isUnknown(conds []metav1.Condition, typ string) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Status == metav1.ConditionUnknown
}
