package controlplane

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/config/rbac"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
)

// InstallSystem makes what the controllers, host agents and people rely on
// besides the CRDs: kube-system where it is missing, the system namespace (host Leases, the leader Lease,
// hosts' ServiceAccounts, the default OpenRouter key), the control plane's
// ServiceAccount toward the host agents' guest endpoints, and the RBAC of
// config/rbac that is not the controllers' own: the host agents'
// ClusterRoles and their Role in the system namespace, the people's roles
// (dots-editor, dots-viewer) and the access to the Dots API's people paths,
// server-side applied from the embedded manifests.
func InstallSystem(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// kube-system too, which every cluster has but the embedded API server
	// does not make: the API server keeps its identity Lease there, and
	// config/default binds a Role there.
	for _, name := range []string{dotsv1.SystemNamespace, metav1.NamespaceSystem} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err == nil {
			continue
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create the namespace %s: %w", name, err)
		}
	}
	// The control plane's identity toward the host agents' guest endpoints:
	// the Dots API asks tokens of it for their audience alone.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: hostidentity.GuestProxyServiceAccount}}
	if _, err := cs.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	for _, stream := range [][]byte{rbac.HostAgentRole, rbac.PeopleRoles, rbac.DotsAPIAccess, rbac.DotsAPIDiscovery} {
		for _, doc := range yamlDocuments(stream) {
			if err := applyRBAC(ctx, cs, doc); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyRBAC server-side applies one embedded ClusterRole, Role or
// ClusterRoleBinding.
func applyRBAC(ctx context.Context, cs kubernetes.Interface, doc []byte) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return fmt.Errorf("parse an embedded RBAC manifest: %w", err)
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	switch meta.Kind {
	case "ClusterRole":
		var ac rbacac.ClusterRoleApplyConfiguration
		if err := yaml.Unmarshal(doc, &ac); err != nil {
			return fmt.Errorf("parse an embedded ClusterRole: %w", err)
		}
		if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, &ac, opts); err != nil {
			return fmt.Errorf("apply the ClusterRole %s: %w", *ac.Name, err)
		}
	case "Role":
		// The host agents' rules in the system namespace alone (the default
		// OpenRouter key's Secret, by name).
		var ac rbacac.RoleApplyConfiguration
		if err := yaml.Unmarshal(doc, &ac); err != nil {
			return fmt.Errorf("parse an embedded Role: %w", err)
		}
		if _, err := cs.RbacV1().Roles(*ac.Namespace).Apply(ctx, &ac, opts); err != nil {
			return fmt.Errorf("apply the Role %s/%s: %w", *ac.Namespace, *ac.Name, err)
		}
	case "RoleBinding":
		var ac rbacac.RoleBindingApplyConfiguration
		if err := yaml.Unmarshal(doc, &ac); err != nil {
			return fmt.Errorf("parse an embedded RoleBinding: %w", err)
		}
		if _, err := cs.RbacV1().RoleBindings(*ac.Namespace).Apply(ctx, &ac, opts); err != nil {
			return fmt.Errorf("apply the RoleBinding %s/%s: %w", *ac.Namespace, *ac.Name, err)
		}
	case "ClusterRoleBinding":
		var ac rbacac.ClusterRoleBindingApplyConfiguration
		if err := yaml.Unmarshal(doc, &ac); err != nil {
			return fmt.Errorf("parse an embedded ClusterRoleBinding: %w", err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, &ac, opts); err != nil {
			return fmt.Errorf("apply the ClusterRoleBinding %s: %w", *ac.Name, err)
		}
	default:
		return fmt.Errorf("an embedded RBAC manifest is a %q, not a ClusterRole, Role, RoleBinding or ClusterRoleBinding", meta.Kind)
	}
	return nil
}

// yamlDocuments splits a YAML stream at its "---" lines, dropping empty
// documents.
func yamlDocuments(b []byte) [][]byte {
	var out [][]byte
	for _, doc := range strings.Split("\n"+string(b), "\n---") {
		if strings.TrimSpace(doc) != "" {
			out = append(out, []byte(doc))
		}
	}
	return out
}
