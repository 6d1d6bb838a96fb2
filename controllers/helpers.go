package controllers

import (
	"context"

	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultShutdownTimeout bounds how long the manager waits for running
// reconciles when the server stops.
const defaultShutdownTimeout = 10 * time.Second

// concurrentReconciles is how many objects of one kind are reconciled at
// once: a reconcile is a few API writes, and one worker made 1000 Dots wait
// minutes for their Computers.
const concurrentReconciles = 4

func ptrDuration(d time.Duration) *time.Duration { return &d }

// setCondition sets one condition with the object's generation. Its
// LastTransitionTime changes only when the status does.
func setCondition(conds *[]metav1.Condition, generation int64, now time.Time, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// ensureFinalizer adds finalizer to a live object that lacks it (cluster-api's
// EnsureFinalizer). It reports whether it patched: the caller returns then,
// and the patch's own watch event brings the next reconcile.
func ensureFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (bool, error) {
	if !obj.GetDeletionTimestamp().IsZero() || controllerutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.AddFinalizer(obj, finalizer)
	return true, c.Patch(ctx, obj, patch)
}
