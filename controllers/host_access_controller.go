package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// HostAccessControllerName names the host access reconciler.
const HostAccessControllerName = "host-access-controller"

// HostSecretsRole is the ClusterRole a host agent is given in each
// namespace where it has Computers, and in no other: reading and making
// Secrets (guest tokens, the keys its guests need). It is what Kubernetes'
// node authorizer does for a kubelet, in plain RBAC.
const HostSecretsRole = "invisible-dots-host-agent-secrets"

// HostAccessLabel marks the RoleBindings this controller keeps, with the
// host's name as the value.
const HostAccessLabel = "dots.invisible.dev/host-access"

// HostServiceAccount is the ServiceAccount (in dotsv1.SystemNamespace) whose
// token a joined host's agent uses: `invisible-dots host join` makes it.
func HostServiceAccount(host string) string { return "host-" + host }

// HostOfUser is the host whose agent user (an authenticated user's name) is,
// when it is one: the ServiceAccount HostServiceAccount(host) of the system
// namespace. A ServiceAccount of that name in another namespace is not.
func HostOfUser(user string) (string, bool) {
	ns, name, err := serviceaccount.SplitUsername(user)
	prefix := HostServiceAccount("")
	if err != nil || ns != dotsv1.SystemNamespace || !strings.HasPrefix(name, prefix) || len(name) == len(prefix) {
		return "", false
	}
	return strings.TrimPrefix(name, prefix), true
}

// HostAccessBindingName is the RoleBinding giving host its Secrets in a
// namespace.
func HostAccessBindingName(host string) string { return "invisible-dots-host-" + host }

// HostAccessReconciler keeps, in each namespace, one RoleBinding of
// HostSecretsRole per host that has a Computer there, and removes the
// bindings of hosts that no longer do. Keyed by namespace.
type HostAccessReconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=invisible-dots-host-agent-secrets

// SetupWithManager registers the reconciler: a Computer or a RoleBinding
// of its kind wakes its namespace.
func (r *HostAccessReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if _, ok := o.(*rbacv1.RoleBinding); ok && o.GetLabels()[HostAccessLabel] == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetNamespace()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(HostAccessControllerName).
		Watches(&dotsv1.Computer{}, byNamespace).
		Watches(&rbacv1.RoleBinding{}, byNamespace).
		Complete(r)
}

// Reconcile makes one namespace's host bindings match its Computers.
func (r *HostAccessReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Name
	var computers dotsv1.ComputerList
	if err := r.Client.List(ctx, &computers, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	var hosts []string
	for _, c := range computers.Items {
		if h := c.Spec.NodeName; h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	var bindings rbacv1.RoleBindingList
	if err := r.Client.List(ctx, &bindings, client.InNamespace(ns), client.HasLabels{HostAccessLabel}); err != nil {
		return ctrl.Result{}, err
	}
	for _, b := range bindings.Items {
		if !slices.Contains(hosts, b.Labels[HostAccessLabel]) {
			if err := r.Client.Delete(ctx, &b); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("remove host %s's access to namespace %s: %w", b.Labels[HostAccessLabel], ns, err)
			}
		}
	}
	for _, h := range hosts {
		want := hostAccessBinding(ns, h)
		err := r.Client.Create(ctx, want)
		if apierrors.IsAlreadyExists(err) {
			continue // its roleRef cannot change, and its subject is fixed by the name
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("give host %s access to namespace %s: %w", h, ns, err)
		}
	}
	return ctrl.Result{}, nil
}

func hostAccessBinding(ns, host string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: HostAccessBindingName(host), Namespace: ns,
			Labels: map[string]string{HostAccessLabel: host},
		},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: HostSecretsRole},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Name: HostServiceAccount(host), Namespace: dotsv1.SystemNamespace,
		}},
	}
}
