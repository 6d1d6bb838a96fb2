package controllers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// TestMCPSecretsNoLongerNamedAreDeleted: the reconcile that sees a config
// without a secret deletes its value from the Dot's Secret, whether its
// server went or its name was dropped, and keeps the key and every secret
// still named (ref 4.3).
func TestMCPSecretsNoLongerNamedAreDeleted(t *testing.T) {
	dot := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "helper"}, Spec: dotsv1.DotSpec{
		SecretRef:  &dotsv1.SecretReference{Name: "helper-secrets"},
		MCPServers: []dotsv1.MCPServer{{Name: "search", Command: "search-server", Secrets: []string{"TOKEN"}}},
	}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "helper-secrets"}, Data: map[string][]byte{
		dotsv1.OpenRouterKeySecretKey:           []byte("sk-or-v1-key"),
		dotsv1.MCPSecretKey("search", "TOKEN"):  []byte("kept"),
		dotsv1.MCPSecretKey("search", "OLD"):    []byte("name dropped"),
		dotsv1.MCPSecretKey("removed", "TOKEN"): []byte("server removed"),
	}}
	c := clientfake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(sec).Build()
	r := &DotReconciler{Client: c, SecretReader: c}
	gone, err := r.pruneMCPSecrets(context.Background(), dot)
	if err != nil {
		t.Fatalf("pruneMCPSecrets: %v", err)
	}
	if d := cmp.Diff([]string{dotsv1.MCPSecretKey("removed", "TOKEN"), dotsv1.MCPSecretKey("search", "OLD")}, gone); d != "" {
		t.Errorf("keys deleted (-want +got):\n%s", d)
	}
	got := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(sec), got); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range got.Data {
		keys = append(keys, k)
	}
	want := []string{dotsv1.MCPSecretKey("search", "TOKEN"), dotsv1.OpenRouterKeySecretKey}
	if d := cmp.Diff(want, keys, cmpopts.SortSlices(func(a, b string) bool { return a < b })); d != "" {
		t.Errorf("keys left in the Secret (-want +got):\n%s", d)
	}
	// Nothing to drop: nothing written.
	if gone, err := r.pruneMCPSecrets(context.Background(), dot); err != nil || len(gone) != 0 {
		t.Errorf("a second prune = %v, %v; want nothing", gone, err)
	}
}
