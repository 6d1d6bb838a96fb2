package patch

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// EnsureFinalizer adds finalizer to a live object that lacks it (cluster-api's
// EnsureFinalizer). It reports whether it patched: the caller returns then,
// and the patch's own watch event brings the next reconcile, which computes
// status from the object as it now is. An object deleted before the patch
// (the cache still showed it) is gone without having needed the finalizer:
// NotFound reports a patch and no error, so the caller returns quietly
// instead of retrying with backoff and logging an error per deleted object.
func EnsureFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (bool, error) {
	if !obj.GetDeletionTimestamp().IsZero() || controllerutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	p := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.AddFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, p); err != nil && !apierrors.IsNotFound(err) {
		return true, err
	}
	return true, nil
}

// RemoveFinalizer removes finalizer, the last step of a deletion: once it is
// gone the object may be gone too, so NotFound is success.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	p := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.RemoveFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, p); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
