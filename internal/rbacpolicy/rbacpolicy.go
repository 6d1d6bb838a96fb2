// Package rbacpolicy makes Kubernetes' default RBAC policy (cluster-admin,
// admin, edit, view, the system: roles and their bindings) from upstream's
// own tables (bootstrappolicy) through upstream's own reconciliation, as
// kube-apiserver's rbac/bootstrap-roles hook does, but several objects at a
// time and from the first moment: that hook sleeps a second before its first
// try, then sends its requests one after another. The API server uses it on
// a first start (internal/apiserver's rbacbootstrap.go).
package rbacpolicy

import (
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// Workers is how many objects are reconciled at once. The API server's CPU
// bounds a first start's: 8 and 32 took the same second on two cores.
const Workers = 8

// Make creates every object of the default policy that is missing, and
// puts back the rules and subjects an existing one lacks (upstream's
// reconciliation, confirmed; what it protects it leaves). Every object is
// tried; the error names the first that failed, and how many did.
func Make(client kubernetes.Interface) error {
	var g errgroup.Group
	g.SetLimit(Workers)
	var (
		mu     sync.Mutex
		first  error
		failed int
	)
	for _, step := range steps(client) {
		g.Go(func() error {
			// Two workers may make one namespace (kube-system) at once, and
			// the store may still be coming up: tried again, as upstream's
			// hook does.
			err := retry.OnError(retry.DefaultBackoff, func(err error) bool {
				return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsServiceUnavailable(err)
			}, step.run)
			if err != nil {
				mu.Lock()
				defer mu.Unlock()
				failed++
				if first == nil {
					first = fmt.Errorf("%s: %w", step.what, err)
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	if first != nil {
		return fmt.Errorf("%d objects of the default RBAC policy could not be made, the first %w", failed, first)
	}
	return nil
}

// step reconciles one object of the policy.
type step struct {
	what string
	run  func() error
}

// steps are the policy's objects, in upstream's tables: cluster roles,
// cluster role bindings, then the namespaced roles and bindings.
func steps(client kubernetes.Interface) []step {
	rbac := client.RbacV1()
	namespaces := client.CoreV1().Namespaces()
	var out []step
	role := func(what string, o reconciliation.ReconcileRoleOptions) {
		o.Confirm = true
		out = append(out, step{what, func() error { _, err := o.Run(); return err }})
	}
	binding := func(what string, o reconciliation.ReconcileRoleBindingOptions) {
		o.Confirm = true
		out = append(out, step{what, func() error { _, err := o.Run(); return err }})
	}
	for _, r := range append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...) {
		role("clusterrole "+r.Name, reconciliation.ReconcileRoleOptions{
			Role:   reconciliation.ClusterRoleRuleOwner{ClusterRole: &r},
			Client: reconciliation.ClusterRoleModifier{Client: rbac.ClusterRoles()},
		})
	}
	for _, b := range append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...) {
		binding("clusterrolebinding "+b.Name, reconciliation.ReconcileRoleBindingOptions{
			RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &b},
			Client:      reconciliation.ClusterRoleBindingClientAdapter{Client: rbac.ClusterRoleBindings()},
		})
	}
	for ns, roles := range bootstrappolicy.NamespaceRoles() {
		for _, r := range roles {
			role("role "+ns+"/"+r.Name, reconciliation.ReconcileRoleOptions{
				Role:   reconciliation.RoleRuleOwner{Role: &r},
				Client: reconciliation.RoleModifier{Client: rbac, NamespaceClient: namespaces},
			})
		}
	}
	for ns, bindings := range bootstrappolicy.NamespaceRoleBindings() {
		for _, b := range bindings {
			binding("rolebinding "+ns+"/"+b.Name, reconciliation.ReconcileRoleBindingOptions{
				RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: &b},
				Client:      reconciliation.RoleBindingClientAdapter{Client: rbac, NamespaceClient: namespaces},
			})
		}
	}
	return out
}
