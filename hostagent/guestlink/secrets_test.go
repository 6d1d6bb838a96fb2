package guestlink

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// TestPushAlwaysCarriesTheMCPSecrets: the push names every MCP secret in
// force, and carries an empty map when none is (the last one cleared, or no
// longer named by the config), so the engine drops what it held (ref 4.3).
func TestPushAlwaysCarriesTheMCPSecrets(t *testing.T) {
	const key = "sk-or-v1-0123456789abcdef"
	dot := func(secretNames ...string) *dotsv1.Dot {
		return &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "helper"}, Spec: dotsv1.DotSpec{
			SecretRef:  &dotsv1.SecretReference{Name: "helper-secrets"},
			MCPServers: []dotsv1.MCPServer{{Name: "search", Command: "search-server", Secrets: secretNames}},
		}}
	}
	secret := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "helper-secrets"}, Data: map[string][]byte{dotsv1.OpenRouterKeySecretKey: []byte(key)}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	tests := map[string]struct {
		dot    *dotsv1.Dot
		secret *corev1.Secret
		want   string // mcp_secrets as JSON
	}{
		"a secret set":         {dot("TOKEN"), secret(map[string]string{dotsv1.MCPSecretKey("search", "TOKEN"): "tok-1"}), `{"search":{"TOKEN":"tok-1"}}`},
		"the last one cleared": {dot("TOKEN"), secret(nil), `{}`},
		"no longer named":      {dot(), secret(map[string]string{dotsv1.MCPSecretKey("search", "TOKEN"): "tok-1"}), `{}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := clientfake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(tc.secret).Build()
			set, problem := readSecrets(context.Background(), c, tc.dot)
			if problem != nil {
				t.Fatalf("readSecrets: %s", problem.message)
			}
			body, _ := json.Marshal(set.req)
			var got struct {
				MCPSecrets json.RawMessage `json:"mcp_secrets"`
			}
			json.Unmarshal(body, &got)
			if d := cmp.Diff(tc.want, string(got.MCPSecrets)); d != "" {
				t.Errorf("mcp_secrets pushed (-want +got):\n%s", d)
			}
		})
	}
}
