package keystore

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

func TestReadKey(t *testing.T) {
	tests := map[string]struct {
		reason  string
		in      string
		want    string
		wantErr string
	}{
		"piped with a newline": {"echo adds a line end, which is not part of the key", "sk-or-v1-abc\n", "sk-or-v1-abc", ""},
		"printf":               {"printf '%s' adds nothing", "sk-or-v1-abc", "sk-or-v1-abc", ""},
		"windows line end":     {"a pasted line from a CRLF file", "sk-or-v1-abc\r\n", "sk-or-v1-abc", ""},
		"empty":                {"nothing on standard input is no key", "", "", "no key on standard input"},
		"only a line end":      {"an empty line is no key either", "\n", "", "no key on standard input"},
		"space":                {"a space cannot travel in a header (ref 4.3)", "sk-or v1", "", protocol.OpenRouterKeyRule},
		"two lines":            {"a newline inside the key breaks the header", "sk-or\nv1\n", "", protocol.OpenRouterKeyRule},
		"non-ascii":            {"printable ASCII only", "sk-or-ключ", "", protocol.OpenRouterKeyRule},
		"too long":             {"a file piped by mistake is refused without echoing it", strings.Repeat("k", 5000), "", "more than 4096 bytes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ReadKey(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s\nReadKey(%q) = %q, %v; want an error with %q", tc.reason, tc.in, got, err, tc.wantErr)
				}
				if tc.in != "" && strings.TrimSpace(tc.in) != "" && strings.Contains(err.Error(), strings.TrimSpace(tc.in)) {
					t.Errorf("%s\nthe error %q repeats the input", tc.reason, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%s\nReadKey(%q) = %q, %v; want %q", tc.reason, tc.in, got, err, tc.want)
			}
		})
	}
}

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	return clientfake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()
}

func dot(ref string) *dotsv1.Dot {
	d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: "team-a", UID: "uid-helper"},
		Spec: dotsv1.DotSpec{Model: dotsv1.ModelRef{ID: "m"}}}
	if ref != "" {
		d.Spec.SecretRef = &dotsv1.SecretReference{Name: ref}
	}
	return d
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	helper := types.NamespacedName{Namespace: "team-a", Name: "helper"}
	tests := map[string]struct {
		reason string
		objs   []client.Object
		store  func(c client.Client) (Stored, error)
		want   Stored
		// secret is the Secret to read back, data what it must hold.
		secret types.NamespacedName
		data   map[string]string
		owned  bool
		ref    string
		// announced: the Dot is annotated with the Secret's new version.
		announced bool
		wantErr   string
	}{
		"default, new": {
			reason: "the host-wide default goes to the system namespace's Secret",
			store:  func(c client.Client) (Stored, error) { return StoreDefault(ctx, c, "sk-new") },
			want:   Stored{Secret: types.NamespacedName{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}, Created: true},
			secret: types.NamespacedName{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName},
			data:   map[string]string{dotsv1.OpenRouterKeySecretKey: "sk-new"},
		},
		"default, rotated": {
			reason: "storing again replaces the key",
			objs: []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName},
				Data: map[string][]byte{dotsv1.OpenRouterKeySecretKey: []byte("sk-old")}}},
			store:  func(c client.Client) (Stored, error) { return StoreDefault(ctx, c, "sk-new") },
			want:   Stored{Secret: types.NamespacedName{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}},
			secret: types.NamespacedName{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName},
			data:   map[string]string{dotsv1.OpenRouterKeySecretKey: "sk-new"},
		},
		"a Dot without a secretRef": {
			reason:    "the Dot gets a Secret of its own, owned by it, and its spec.secretRef names it",
			objs:      []client.Object{dot("")},
			store:     func(c client.Client) (Stored, error) { return StoreForDot(ctx, c, helper, "sk-own") },
			want:      Stored{Secret: types.NamespacedName{Namespace: "team-a", Name: "helper-secrets"}, Created: true, RefSet: true},
			secret:    types.NamespacedName{Namespace: "team-a", Name: "helper-secrets"},
			data:      map[string]string{dotsv1.OpenRouterKeySecretKey: "sk-own"},
			owned:     true,
			ref:       "helper-secrets",
			announced: true,
		},
		"a Dot with a secretRef": {
			reason: "the Secret the Dot names keeps its MCP secrets; only the key changes, and the ref stays",
			objs: []client.Object{dot("mine"), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mine"},
				Data: map[string][]byte{"mcp.time.TIME_API_KEY": []byte("t")}}},
			store:     func(c client.Client) (Stored, error) { return StoreForDot(ctx, c, helper, "sk-own") },
			want:      Stored{Secret: types.NamespacedName{Namespace: "team-a", Name: "mine"}},
			secret:    types.NamespacedName{Namespace: "team-a", Name: "mine"},
			data:      map[string]string{dotsv1.OpenRouterKeySecretKey: "sk-own", "mcp.time.TIME_API_KEY": "t"},
			ref:       "mine",
			announced: true,
		},
		"an MCP secret": {
			reason: "an MCP secret goes to the Dot's Secret under mcp.<server>.<NAME>, beside the key, and the Dot hears of it",
			objs: []client.Object{dot("mine"), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mine"},
				Data: map[string][]byte{dotsv1.OpenRouterKeySecretKey: []byte("sk-own")}}},
			store: func(c client.Client) (Stored, error) {
				return PutMCPSecret(ctx, c, helper, "time", "TIME_API_KEY", "Bearer t")
			},
			want:      Stored{Secret: types.NamespacedName{Namespace: "team-a", Name: "mine"}},
			secret:    types.NamespacedName{Namespace: "team-a", Name: "mine"},
			data:      map[string]string{dotsv1.OpenRouterKeySecretKey: "sk-own", "mcp.time.TIME_API_KEY": "Bearer t"},
			ref:       "mine",
			announced: true,
		},
		"an MCP secret of a Dot without a secretRef": {
			reason: "the Dot gets its own Secret for it, as for its key",
			objs:   []client.Object{dot("")},
			store: func(c client.Client) (Stored, error) {
				return PutMCPSecret(ctx, c, helper, "time", "TIME_API_KEY", "t")
			},
			want:      Stored{Secret: types.NamespacedName{Namespace: "team-a", Name: "helper-secrets"}, Created: true, RefSet: true},
			secret:    types.NamespacedName{Namespace: "team-a", Name: "helper-secrets"},
			data:      map[string]string{"mcp.time.TIME_API_KEY": "t"},
			owned:     true,
			ref:       "helper-secrets",
			announced: true,
		},
		"the same MCP secret again": {
			reason: "a value stored already changes nothing, so nothing is pushed",
			objs: []client.Object{dot("mine"), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mine"},
				Data: map[string][]byte{"mcp.time.TIME_API_KEY": []byte("t")}}},
			store: func(c client.Client) (Stored, error) {
				return PutMCPSecret(ctx, c, helper, "time", "TIME_API_KEY", "t")
			},
			want:   Stored{Secret: types.NamespacedName{Namespace: "team-a", Name: "mine"}},
			secret: types.NamespacedName{Namespace: "team-a", Name: "mine"},
			data:   map[string]string{"mcp.time.TIME_API_KEY": "t"},
			ref:    "mine",
		},
		"an MCP secret cleared": {
			reason: "clearing removes that key alone, and the Dot hears of it",
			objs: []client.Object{dot("mine"), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mine"},
				Data: map[string][]byte{dotsv1.OpenRouterKeySecretKey: []byte("sk-own"), "mcp.time.TIME_API_KEY": []byte("t")}}},
			store:     func(c client.Client) (Stored, error) { return ClearMCPSecret(ctx, c, helper, "time", "TIME_API_KEY") },
			want:      Stored{Secret: types.NamespacedName{Namespace: "team-a", Name: "mine"}},
			secret:    types.NamespacedName{Namespace: "team-a", Name: "mine"},
			data:      map[string]string{dotsv1.OpenRouterKeySecretKey: "sk-own"},
			ref:       "mine",
			announced: true,
		},
		"an MCP secret cleared of a Dot without a Secret": {
			reason: "there is nothing to clear, and no Secret is made for it",
			objs:   []client.Object{dot("")},
			store:  func(c client.Client) (Stored, error) { return ClearMCPSecret(ctx, c, helper, "time", "TIME_API_KEY") },
			want:   Stored{},
		},
		"no such Dot": {
			reason:  "a key for a Dot that does not exist is not stored anywhere",
			store:   func(c client.Client) (Stored, error) { return StoreForDot(ctx, c, helper, "sk-own") },
			wantErr: "there is no Dot helper in namespace team-a",
		},
		"someone else's Secret of the name": {
			reason: "a Secret named like the Dot's that the Dot does not own is not written over",
			objs: []client.Object{dot(""), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "helper-secrets"},
				Data: map[string][]byte{"other": []byte("x")}}},
			store:   func(c client.Client) (Stored, error) { return StoreForDot(ctx, c, helper, "sk-own") },
			wantErr: "does not belong to Dot helper",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, tc.objs...)
			got, err := tc.store(c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s\nerror = %v, want %q", tc.reason, err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "sk-own") {
					t.Errorf("%s\nthe error %q holds the key", tc.reason, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s\n%v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nStored -want +got:\n%s", tc.reason, diff)
			}
			d := &dotsv1.Dot{}
			if err := c.Get(ctx, helper, d); err != nil && tc.secret.Name != dotsv1.DefaultKeySecretName {
				t.Fatal(err)
			}
			if tc.secret.Name == "" {
				list := &corev1.SecretList{}
				if err := c.List(ctx, list); err != nil {
					t.Fatal(err)
				}
				if len(list.Items) != 0 {
					t.Errorf("%s\nSecrets were made: %d", tc.reason, len(list.Items))
				}
				return
			}
			sec := &corev1.Secret{}
			if err := c.Get(ctx, tc.secret, sec); err != nil {
				t.Fatal(err)
			}
			data := map[string]string{}
			for k, v := range sec.Data {
				data[k] = string(v)
			}
			if diff := cmp.Diff(tc.data, data); diff != "" {
				t.Errorf("%s\nSecret data -want +got:\n%s", tc.reason, diff)
			}
			if owned := len(sec.OwnerReferences) == 1 && sec.OwnerReferences[0].UID == "uid-helper"; owned != tc.owned {
				t.Errorf("%s\nowned by the Dot: %v, want %v", tc.reason, owned, tc.owned)
			}
			if announced := d.Annotations[dotsv1.SecretsChangedAnnotation]; (announced == sec.ResourceVersion) != tc.announced {
				t.Errorf("%s\nthe Dot's %s is %q, the Secret's version %q; want announced %v", tc.reason, dotsv1.SecretsChangedAnnotation, announced, sec.ResourceVersion, tc.announced)
			}
			if tc.ref != "" {
				if d.Spec.SecretRef == nil || d.Spec.SecretRef.Name != tc.ref {
					t.Errorf("%s\nspec.secretRef = %+v, want %q", tc.reason, d.Spec.SecretRef, tc.ref)
				}
			}
		})
	}
}
