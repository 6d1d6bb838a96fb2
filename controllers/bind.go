package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Condition of a Task and of an Approval: their Dot exists and owns them.
const (
	DotBoundCondition = "DotBound"
	DotBoundReason    = "Bound"
	DotMissingReason  = "DotMissing"
)

// bindToDot makes the Dot named dotName (in obj's namespace) obj's
// controlling owner, so deleting the Dot deletes obj, and sets obj's DotBound
// condition. A missing Dot is not an error: obj waits for one, and says so.
func bindToDot(ctx context.Context, c client.Client, obj client.Object, dotName string, conds *[]metav1.Condition, now metav1.Time) error {
	dot := &dotsv1.Dot{}
	err := c.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: dotName}, dot)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err != nil || !dot.DeletionTimestamp.IsZero() {
		setCondition(conds, obj.GetGeneration(), now.Time, DotBoundCondition, metav1.ConditionFalse, DotMissingReason,
			fmt.Sprintf("there is no Dot %q in namespace %s; this waits until one is made", dotName, obj.GetNamespace()))
		return nil
	}
	if !metav1.IsControlledBy(obj, dot) {
		// A merge patch of metadata only: the caller patches the status
		// separately, from its own copy.
		patched := obj.DeepCopyObject().(client.Object)
		if err := controllerutil.SetControllerReference(dot, patched, c.Scheme()); err != nil {
			return fmt.Errorf("make Dot %s the owner: %w", dot.Name, err)
		}
		if err := c.Patch(ctx, patched, client.MergeFrom(obj)); err != nil {
			return err
		}
		obj.SetOwnerReferences(patched.GetOwnerReferences())
		obj.SetResourceVersion(patched.GetResourceVersion())
	}
	setCondition(conds, obj.GetGeneration(), now.Time, DotBoundCondition, metav1.ConditionTrue, DotBoundReason, "Dot "+dot.Name+" owns this")
	return nil
}
