package rbacpolicy

import (
	"context"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakeclient "k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-helpers/auth/rbac/validation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// The whole of upstream's tables is made in an empty store (client-go's
// fake clientset stands in for the API server here): every cluster role
// with its rules, every binding with its subjects, and the namespaced ones
// with their namespaces.
func TestMakeMakesUpstreamsWholePolicy(t *testing.T) {
	ctx := context.Background()
	client := fakeclient.NewClientset()
	if err := Make(client); err != nil {
		t.Fatal(err)
	}
	for _, want := range append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...) {
		got, err := client.RbacV1().ClusterRoles().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("clusterrole %s: %v", want.Name, err)
			continue
		}
		if !apiequality.Semantic.DeepEqual(got.Rules, want.Rules) || !apiequality.Semantic.DeepEqual(got.AggregationRule, want.AggregationRule) {
			t.Errorf("clusterrole %s has rules %v (aggregation %v), upstream's are %v (%v)", want.Name, got.Rules, got.AggregationRule, want.Rules, want.AggregationRule)
		}
	}
	for _, want := range append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...) {
		got, err := client.RbacV1().ClusterRoleBindings().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("clusterrolebinding %s: %v", want.Name, err)
			continue
		}
		if got.RoleRef != want.RoleRef || !apiequality.Semantic.DeepEqual(got.Subjects, want.Subjects) {
			t.Errorf("clusterrolebinding %s binds %v to %v, upstream's %v to %v", want.Name, got.RoleRef, got.Subjects, want.RoleRef, want.Subjects)
		}
	}
	namespaced := 0
	for ns, roles := range bootstrappolicy.NamespaceRoles() {
		if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s of upstream's roles: %v", ns, err)
		}
		for _, want := range roles {
			namespaced++
			if _, err := client.RbacV1().Roles(ns).Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("role %s/%s: %v", ns, want.Name, err)
			}
		}
	}
	for ns, bindings := range bootstrappolicy.NamespaceRoleBindings() {
		for _, want := range bindings {
			namespaced++
			if _, err := client.RbacV1().RoleBindings(ns).Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("rolebinding %s/%s: %v", ns, want.Name, err)
			}
		}
	}
	if namespaced == 0 {
		t.Error("upstream's tables have no namespaced roles or bindings: this test no longer looks at them")
	}
}

// A store that has the policy, but with a default role someone cut down,
// and a binding deleted, gets them back.
func TestMakePutsBackWhatWasTakenFromTheDefaultPolicy(t *testing.T) {
	ctx := context.Background()
	client := fakeclient.NewClientset()
	if err := Make(client); err != nil {
		t.Fatal(err)
	}
	view, err := client.RbacV1().ClusterRoles().Get(ctx, "system:public-info-viewer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(view.Rules)
	view.Rules = []rbacv1.PolicyRule{}
	if _, err := client.RbacV1().ClusterRoles().Update(ctx, view, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.RbacV1().ClusterRoleBindings().Delete(ctx, "system:public-info-viewer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Make(client); err != nil {
		t.Fatal(err)
	}
	got, err := client.RbacV1().ClusterRoles().Get(ctx, "system:public-info-viewer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Upstream's reconciliation adds what is missing rule by rule: what
	// counts is that the rules allow all they allowed.
	if covers, missing := validation.Covers(got.Rules, want); !covers {
		t.Errorf("the cut-down role has rules %v; these are not back: %v", got.Rules, missing)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Get(ctx, "system:public-info-viewer", metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted binding is not back: %v", err)
	}
}
