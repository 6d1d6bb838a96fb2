package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/invisible-dots/invisible-dots/internal/store"
)

// LogRetentionControllerName names the log retention reconciler.
const LogRetentionControllerName = "log-retention-controller"

// LogRetentionReconciler keeps a deleted Dot's log for its history (a
// person reads what it did after it is gone) until its namespace goes:
// then every row of the namespace's Dots is removed. Keyed by namespace.
type LogRetentionReconciler struct {
	Client client.Client
	Store  *store.Store
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// SetupWithManager registers the reconciler: every namespace, and at the
// start every namespace the log still has rows of (one deleted while no
// control plane ran is found then).
func (r *LogRetentionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	logged := make(chan event.GenericEvent, 64)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		nss, err := r.Store.Namespaces(ctx)
		if err != nil {
			return err
		}
		for _, ns := range nss {
			select {
			case logged <- event.GenericEvent{Object: &corev1.Namespace{ObjectMeta: metaNamed(ns)}}:
			case <-ctx.Done():
				return nil
			}
		}
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Namespace{}).
		WatchesRawSource(source.Channel(logged, &handler.EnqueueRequestForObject{})).
		Named(LogRetentionControllerName).
		Complete(r)
}

// Reconcile removes the rows of a namespace that is gone or going.
func (r *LogRetentionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := &corev1.Namespace{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: req.Name}, ns)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, err
	case ns.DeletionTimestamp.IsZero():
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.Store.DeleteNamespace(ctx, req.Name)
}

func metaNamed(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }
