package controllers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// bindToDot makes the Dot named dotName (in obj's namespace) obj's
// controlling owner, so deleting the Dot deletes obj, and sets obj's DotBound
// condition. A missing Dot is not an error: obj waits for one, and says so.
// It reports whether it patched obj's owner: the caller returns then and
// computes status on the reconcile the patch's watch event brings, from the
// object as it now is.
func bindToDot(ctx context.Context, c client.Client, obj patch.Object, dotName string, now time.Time) (bool, error) {
	dot := &dotsv1.Dot{}
	err := c.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: dotName}, dot)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	if err != nil || !dot.DeletionTimestamp.IsZero() {
		patch.SetCondition(obj, now, dotsv1.DotBoundCondition, metav1.ConditionFalse, dotsv1.DotMissingReason,
			fmt.Sprintf("there is no Dot %q in namespace %s; this waits until one is made", dotName, obj.GetNamespace()))
		return false, nil
	}
	if !metav1.IsControlledBy(obj, dot) {
		p := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		if err := controllerutil.SetControllerReference(dot, obj, c.Scheme()); err != nil {
			return false, fmt.Errorf("make Dot %s the owner: %w", dot.Name, err)
		}
		return true, c.Patch(ctx, obj, p)
	}
	patch.SetCondition(obj, now, dotsv1.DotBoundCondition, metav1.ConditionTrue, dotsv1.DotBoundReason, "Dot "+dot.Name+" owns this")
	return false, nil
}

// boundTo are the objects of list's kind in the Dot o's namespace whose Dot
// (dotName) is o, as requests. Only names are read: no copy of every object
// of the namespace.
func boundTo(ctx context.Context, c client.Reader, o client.Object, list client.ObjectList, dotName func(client.Object) string) []reconcile.Request {
	if err := c.List(ctx, list, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	_ = meta.EachListItem(list, func(item runtime.Object) error {
		if obj, ok := item.(client.Object); ok && dotName(obj) == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		}
		return nil
	})
	return out
}
