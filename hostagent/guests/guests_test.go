package guests

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

const goodToken = "0123456789abcdef0123456789abcdef"

func testComputer() *dotsv1.Computer {
	return &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "helper", UID: "uid-c"}}
}

func tokenSecret(c *dotsv1.Computer, owned bool, tok string) *corev1.Secret {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: dotsv1.GuestTokenSecretName(c.Name)},
		Data:       map[string][]byte{TokenKey: []byte(tok)},
	}
	if owned {
		sec.OwnerReferences = []metav1.OwnerReference{{APIVersion: "dots.invisible.dev/v1alpha1", Kind: "Computer", Name: c.Name, UID: c.UID, Controller: ptr.To(true)}}
	}
	return sec
}

func TestTokenIn(t *testing.T) {
	c := testComputer()
	tests := map[string]struct {
		reason  string
		sec     *corev1.Secret
		wantErr string
	}{
		"usable":    {"the Computer's own Secret with a long printable token", tokenSecret(c, true, goodToken), ""},
		"not owned": {"a Secret of the same name the Computer does not own is not read", tokenSecret(c, false, goodToken), "does not belong to Computer helper"},
		"short":     {"one rule: protocol.MinTokenLength", tokenSecret(c, true, "0123456789abcde"), "no usable \"token\" key (at least 16 printable characters)"},
		"space":     {"a space is not printable for the guest's config", tokenSecret(c, true, "0123456789abcdef 0123"), "no usable"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tok, err := TokenIn(c, tc.sec)
			switch {
			case tc.wantErr == "" && (err != nil || tok != goodToken):
				t.Errorf("%s\nTokenIn() = %v; want the token", tc.reason, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("%s\nTokenIn() error = %v; want one with %q", tc.reason, err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), string(tc.sec.Data[TokenKey])):
				t.Errorf("%s\nTokenIn() error %q quotes the token", tc.reason, err)
			}
		})
	}
}

func TestRegistryKeepsTheToken(t *testing.T) {
	ctx := context.Background()
	c := testComputer()
	reader := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	var g Registry
	if _, err := g.Token(ctx, reader, c); !apierrors.IsNotFound(err) {
		t.Fatalf("no Secret yet: Token() = %v; want not found", err)
	}
	if tok, err := g.Keep(c, tokenSecret(c, true, goodToken)); err != nil || tok != goodToken {
		t.Fatalf("Keep() = %v; want the token", err)
	}
	// Kept: the reader is not asked again.
	if tok, err := g.Token(ctx, reader, c); err != nil || tok != goodToken {
		t.Errorf("after Keep: Token() = %v; want the kept token", err)
	}
	g.ForgetToken(c.UID)
	if _, err := g.Token(ctx, reader, c); !apierrors.IsNotFound(err) {
		t.Errorf("after ForgetToken: Token() = %v; want not found (read again)", err)
	}
}

func TestRegistryTargets(t *testing.T) {
	var g Registry
	key := types.NamespacedName{Namespace: "team-a", Name: "helper"}
	if _, ok := g.Target(key); ok {
		t.Errorf("before any proof: a target")
	}
	target := guestclient.Target{Port: 40001, PID: 77, Token: goodToken}
	g.Prove(key, target)
	if got, ok := g.Target(key); !ok || got != target {
		t.Errorf("Target() = %v, %v; want %v", got, ok, target)
	}
	if _, ok := g.Target(types.NamespacedName{Namespace: "team-b", Name: "helper"}); ok {
		t.Errorf("another namespace's Dot of the same name has this guest")
	}
	g.Prove(key, guestclient.Target{})
	if _, ok := g.Target(key); ok {
		t.Errorf("after the guest went: a target")
	}
}
