// Package cachetrim is the transform every controller manager of the product
// (and, in part, the upstream controllers it embeds) applies to the objects
// its informers cache: what no controller reads is
// dropped before it is stored, as kube-controller-manager drops managedFields
// from its informers.
//
// Two things go: metadata.managedFields (server-side apply's bookkeeping,
// often larger than the object's spec) and kubectl's last-applied
// annotation (a second copy of the whole object as a person applied it).
// Both stay in the API server and are what `kubectl apply` and
// `kubectl get -o yaml` show; only the controllers' copies lose them.
//
// It is safe because the controllers change objects by patch (a merge patch
// from the cached copy names only the fields the controller changed) and by
// status updates; the few full Updates are of objects the product writes
// itself (Leases, host access Roles and RoleBindings, a Channel's device
// Secret). An Update of a cached copy of an object a person applied would
// drop its last-applied annotation: change such an object by patch.
//
// The upstream controllers the server embeds (the garbage collector, the
// namespace and ClusterRole aggregation controllers) are not ours to hold to
// that: their typed informers lose managedFields alone (ManagedFields), as in
// kube-controller-manager; the garbage collector's metadata informers, which
// it only reads and patches, lose both.
package cachetrim

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// Transform strips managedFields and the last-applied annotation from an
// object on its way into an informer's cache. Tombstones and anything that
// is not an object pass unchanged.
func Transform(obj any) (any, error) {
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return obj, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	m.SetManagedFields(nil)
	if a := m.GetAnnotations(); a != nil {
		if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
			delete(a, corev1.LastAppliedConfigAnnotation)
			if len(a) == 0 {
				a = nil
			}
			m.SetAnnotations(a)
		}
	}
	return obj, nil
}

// ManagedFields strips managedFields alone, for informers whose controllers
// may Update the objects they cached.
func ManagedFields(obj any) (any, error) {
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return obj, nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
