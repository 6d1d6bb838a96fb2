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
)

// InstallSystem makes what the controllers and host agents rely on besides
// the CRDs: the system namespace (host Leases, the leader Lease, hosts'
// ServiceAccounts, the default OpenRouter key) and the host agents'
// ClusterRoles and their Role in the system namespace, server-side applied
// from the embedded manifests.
func InstallSystem(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dotsv1.SystemNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the namespace %s: %w", dotsv1.SystemNamespace, err)
	}
	for _, file := range [][]byte{rbac.HostAgentRole, rbac.HostAgentSecretsRole} {
		for _, data := range yamlDocuments(file) {
			var kind struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(data, &kind); err != nil {
				return fmt.Errorf("parse an embedded RBAC object: %w", err)
			}
			switch kind.Kind {
			case "ClusterRole":
				var ac rbacac.ClusterRoleApplyConfiguration
				if err := yaml.Unmarshal(data, &ac); err != nil {
					return fmt.Errorf("parse an embedded ClusterRole: %w", err)
				}
				if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, &ac, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
					return fmt.Errorf("apply the ClusterRole %s: %w", *ac.Name, err)
				}
			case "Role":
				// The host agents' rules in the system namespace alone (the
				// default OpenRouter key's Secret, by name).
				var ac rbacac.RoleApplyConfiguration
				if err := yaml.Unmarshal(data, &ac); err != nil {
					return fmt.Errorf("parse an embedded Role: %w", err)
				}
				if _, err := cs.RbacV1().Roles(*ac.Namespace).Apply(ctx, &ac, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
					return fmt.Errorf("apply the Role %s/%s: %w", *ac.Namespace, *ac.Name, err)
				}
			default:
				return fmt.Errorf("an embedded RBAC object is a %q, neither a ClusterRole nor a Role", kind.Kind)
			}
		}
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
