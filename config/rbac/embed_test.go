package rbac

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// TestHostAgentSecretsAreNarrow: the host agent's cluster-wide role grants
// no Secret at all; in the system namespace its Role reads exactly one
// Secret, the default OpenRouter key, by name. Its guests' tokens and keys
// elsewhere come namespace by namespace, by name (controllers'
// HostAccessReconciler).
func TestHostAgentSecretsAreNarrow(t *testing.T) {
	var cluster []rbacv1.ClusterRole
	var roles []rbacv1.Role
	for _, doc := range strings.Split("\n"+string(HostAgentRole), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var kind struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &kind); err != nil {
			t.Fatal(err)
		}
		switch kind.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			cluster = append(cluster, r)
		case "Role":
			var r rbacv1.Role
			if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			roles = append(roles, r)
		default:
			t.Fatalf("host_agent/role.yaml holds a %q", kind.Kind)
		}
	}
	if len(cluster) != 1 || len(roles) != 1 {
		t.Fatalf("host_agent/role.yaml holds %d ClusterRoles and %d Roles; want one of each", len(cluster), len(roles))
	}
	for _, rule := range cluster[0].Rules {
		for _, res := range rule.Resources {
			if res == "secrets" {
				t.Errorf("the host agent's ClusterRole grants %v on secrets in every namespace", rule.Verbs)
			}
		}
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{dotsv1.DefaultKeySecretName}, Verbs: []string{"get"}}}
	if roles[0].Namespace != dotsv1.SystemNamespace || roles[0].Name != cluster[0].Name {
		t.Errorf("the Role is %s/%s; want %s/%s", roles[0].Namespace, roles[0].Name, dotsv1.SystemNamespace, cluster[0].Name)
	}
	if diff := cmp.Diff(want, roles[0].Rules); diff != "" {
		t.Errorf("the host agent's rules in %s -want +got:\n%s", dotsv1.SystemNamespace, diff)
	}
}
