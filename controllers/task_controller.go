package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// TaskControllerName names the Task reconciler.
const TaskControllerName = "task-controller"

// TaskReconciler binds each Task to its Dot: the Dot becomes the Task's owner
// (so deleting the Dot deletes its tasks) and a new Task is PENDING. The
// embedded server makes a Task owned as it is made when its Dot exists
// (internal/taskowner); the rest (a Task made before its Dot, a cluster
// without that plugin) are bound here. Running
// tasks in the guest is the dispatcher's, a later concern.
type TaskReconciler struct {
	Client   client.Client
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks/status,verbs=get;update;patch

// SetupWithManager registers the reconciler; a Dot that appears, or that
// goes, wakes the Tasks that name it (bindToDot). Its other changes (its
// status moves with every turn) are nothing to a Task's binding, and would
// wake every Task the Dot ever had.
func (r *TaskReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Task{}).
		Watches(&dotsv1.Dot{}, handler.EnqueueRequestsFromMapFunc(r.tasksOfDot), builder.WithPredicates(dotComesOrGoes)).
		Named(TaskControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrentReconciles}).
		Complete(r)
}

// dotComesOrGoes passes a Dot's creation, its deletion, and the update that
// marks it deleted.
var dotComesOrGoes = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// tasksOfDot are the Tasks of the Dot o.
func (r *TaskReconciler) tasksOfDot(ctx context.Context, o client.Object) []reconcile.Request {
	return boundTo(ctx, r.Client, o, &dotsv1.TaskList{}, func(x client.Object) string { return x.(*dotsv1.Task).Spec.DotName })
}

// taskWriter owns the binding; the phase is the Task's own field.
var taskWriter = patch.Writer{Name: TaskControllerName, Conditions: []string{dotsv1.DotBoundCondition}}

// Reconcile binds the Task to its Dot and sets its first phase.
func (r *TaskReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	task := &dotsv1.Task{}
	if err := r.Client.Get(ctx, req.NamespacedName, task); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !task.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if task.Labels[dotsv1.DotLabel] != task.Spec.DotName {
		// The Dot's label lists one Dot's tasks by a selector. The embedded
		// server sets it at admission (internal/tasklabel); a cluster without
		// that plugin, or a Task made before it, gets it here.
		base := task.DeepCopy()
		if task.Labels == nil {
			task.Labels = map[string]string{}
		}
		task.Labels[dotsv1.DotLabel] = task.Spec.DotName
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Patch(ctx, task, client.MergeFrom(base)))
	}
	helper := patch.NewHelper(r.Client, taskWriter, task)
	if patched, err := bindToDot(ctx, r.Client, task, task.Spec.DotName, r.Clock.Now()); patched || err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	queued := task.Status.Phase == ""
	if queued {
		task.Status.Phase = dotsv1.TaskPending
	}
	task.Status.ObservedGeneration = task.Generation
	written, err := helper.Patch(ctx, task)
	if err != nil {
		return patch.RequeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
	}
	if written && queued {
		r.Recorder.Eventf(task, nil, corev1.EventTypeNormal, "Queued", "Queue", "Task queued for Dot %s", task.Spec.DotName)
	}
	return ctrl.Result{}, nil
}
