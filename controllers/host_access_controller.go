package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
)

// HostAccessControllerName names the host access reconciler.
const HostAccessControllerName = "host-access-controller"

// HostAccessReconciler keeps, in each namespace, a Role and its RoleBinding
// per host that has Computers there, and removes those of hosts that no
// longer do: what Kubernetes' node authorizer does for a kubelet, in plain
// RBAC. A host may read only the Secrets of its own guests, by name (each
// Computer's guest token and the Secret its Dot names in spec.secretRef,
// which holds its key and MCP secrets), and make Secrets (its guests'
// tokens, the first time; a create names nothing RBAC could check). Another
// host's Dot in the same namespace stays out of its reach. Keyed by
// namespace.
type HostAccessReconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings;roles,verbs=get;list;watch;create;update;patch;delete

// SetupWithManager registers the reconciler: a Computer, a Dot (its
// secretRef) or a Role or RoleBinding of its kind wakes its namespace.
func (r *HostAccessReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		switch o.(type) {
		case *rbacv1.RoleBinding, *rbacv1.Role:
			if o.GetLabels()[hostidentity.AccessLabel] == "" {
				return nil
			}
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetNamespace()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(HostAccessControllerName).
		Watches(&dotsv1.Computer{}, byNamespace, builder.WithPredicates(hostAccessChanges(func(o client.Object) string {
			return o.(*dotsv1.Computer).Spec.NodeName
		}))).
		Watches(&dotsv1.Dot{}, byNamespace, builder.WithPredicates(hostAccessChanges(func(o client.Object) string {
			if ref := o.(*dotsv1.Dot).Spec.SecretRef; ref != nil {
				return ref.Name
			}
			return ""
		}))).
		Watches(&rbacv1.Role{}, byNamespace).
		Watches(&rbacv1.RoleBinding{}, byNamespace).
		Complete(r)
}

// hostAccessChanges lets through only the events that can change a
// namespace's host access: an object with the field access depends on (a
// Computer's host, a Dot's secretRef) made or deleted, or that field
// changed. Status writes, which are nearly every write of Computers and
// Dots, wake nothing: each reconcile reads the whole namespace, so waking it
// on each of them cost a Dot's create its share of a loop over every Dot.
func hostAccessChanges(field func(client.Object) string) predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return field(e.Object) != "" },
		DeleteFunc:  func(e event.DeleteEvent) bool { return field(e.Object) != "" },
		UpdateFunc:  func(e event.UpdateEvent) bool { return field(e.ObjectOld) != field(e.ObjectNew) },
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}

// Reconcile makes one namespace's host Roles and bindings match its
// Computers.
func (r *HostAccessReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Name
	// Read only, so the cache's own objects, not copies of every Computer
	// and Dot of the namespace.
	var computers dotsv1.ComputerList
	if err := r.Client.List(ctx, &computers, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	var dots dotsv1.DotList
	if err := r.Client.List(ctx, &dots, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	secretRefs := map[string]string{}
	for _, d := range dots.Items {
		if ref := d.Spec.SecretRef; ref != nil && ref.Name != "" {
			secretRefs[d.Name] = ref.Name
		}
	}
	secrets := hostSecrets(computers.Items, secretRefs)

	var bindings rbacv1.RoleBindingList
	if err := r.Client.List(ctx, &bindings, client.InNamespace(ns), client.HasLabels{hostidentity.AccessLabel}); err != nil {
		return ctrl.Result{}, err
	}
	var roles rbacv1.RoleList
	if err := r.Client.List(ctx, &roles, client.InNamespace(ns), client.HasLabels{hostidentity.AccessLabel}); err != nil {
		return ctrl.Result{}, err
	}
	bound := map[string]bool{}
	for _, b := range bindings.Items {
		host := b.Labels[hostidentity.AccessLabel]
		// A binding of an earlier version points at a ClusterRole that
		// let a host read every Secret of the namespace: it goes.
		if _, ok := secrets[host]; !ok || b.RoleRef.Kind != "Role" {
			if err := r.Client.Delete(ctx, &b); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("remove host %s's access to namespace %s: %w", host, ns, err)
			}
			continue
		}
		bound[b.Name] = true
	}
	have := map[string]*rbacv1.Role{}
	for i, role := range roles.Items {
		if _, ok := secrets[role.Labels[hostidentity.AccessLabel]]; !ok {
			if err := r.Client.Delete(ctx, &role); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("remove host %s's role in namespace %s: %w", role.Labels[hostidentity.AccessLabel], ns, err)
			}
			continue
		}
		have[role.Name] = &roles.Items[i]
	}
	for host, names := range secrets {
		want := hostAccessRole(ns, host, names)
		if err := r.ensureRole(ctx, want, have[want.Name]); err != nil {
			return ctrl.Result{}, ignoreNamespaceGoing(err)
		}
		// Made only when the cache has none: a create that finds one
		// is a write for nothing, and this runs at each Computer placed.
		if binding := hostAccessBinding(ns, host); !bound[binding.Name] {
			if err := r.Client.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
				return ctrl.Result{}, ignoreNamespaceGoing(fmt.Errorf("give host %s access to namespace %s: %w", host, ns, err))
			}
		}
	}
	return ctrl.Result{}, nil
}

// ignoreNamespaceGoing is nil for a write refused because its namespace is
// being deleted: no access is needed there any more, and its deletion
// takes the Roles and bindings with it.
func ignoreNamespaceGoing(err error) error {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return nil
	}
	return err
}

// hostSecrets is, for each host with Computers here, the names of the
// Secrets its guests need: their tokens and their Dots' own Secrets.
func hostSecrets(computers []dotsv1.Computer, secretRefs map[string]string) map[string][]string {
	out := map[string][]string{}
	for _, c := range computers {
		h := c.Spec.NodeName
		if h == "" {
			continue
		}
		out[h] = append(out[h], dotsv1.GuestTokenSecretName(c.Name))
		// The Computer's Dot has its name.
		if ref, ok := secretRefs[c.Name]; ok {
			out[h] = append(out[h], ref)
		}
	}
	for h, names := range out {
		slices.Sort(names)
		out[h] = slices.Compact(names)
	}
	return out
}

// ensureRole creates want or brings the Role of its name to its rules.
// have is the Role as the cache has it, nil when it has none.
func (r *HostAccessReconciler) ensureRole(ctx context.Context, want, have *rbacv1.Role) error {
	if have == nil {
		err := r.Client.Create(ctx, want)
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return fmt.Errorf("make the Role %s/%s: %w", want.Namespace, want.Name, err)
			}
			return nil
		}
		// Made since the cache was read.
		have = &rbacv1.Role{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
			return fmt.Errorf("read the Role %s/%s: %w", want.Namespace, want.Name, err)
		}
	}
	if equality.Semantic.DeepEqual(have.Rules, want.Rules) && have.Labels[hostidentity.AccessLabel] == want.Labels[hostidentity.AccessLabel] {
		return nil
	}
	have.Rules = want.Rules
	if have.Labels == nil {
		have.Labels = map[string]string{}
	}
	have.Labels[hostidentity.AccessLabel] = want.Labels[hostidentity.AccessLabel]
	if err := r.Client.Update(ctx, have); err != nil {
		return fmt.Errorf("update the Role %s/%s: %w", want.Namespace, want.Name, err)
	}
	return nil
}

func hostAccessRole(ns, host string, secrets []string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{
			Name: hostidentity.AccessBindingName(host), Namespace: ns,
			Labels: map[string]string{hostidentity.AccessLabel: host},
		},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: secrets},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		},
	}
}

func hostAccessBinding(ns, host string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: hostidentity.AccessBindingName(host), Namespace: ns,
			Labels: map[string]string{hostidentity.AccessLabel: host},
		},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: hostidentity.AccessBindingName(host)},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Name: hostidentity.ServiceAccount(host), Namespace: dotsv1.SystemNamespace,
		}},
	}
}
