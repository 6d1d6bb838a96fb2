// Package guests is the host agent's registry of the guests on its host:
// each guest's token, read from its Computer's own Secret under the one rule
// of a token's validity (protocol.ValidateToken), and the target it was
// proven at (its QEMU, port and token, from the VM's record, as the guest
// link last found them). The Computer reconciler keeps the token it made;
// the guest link reads it and records the target; the guest endpoint and
// the deliverer reach a guest only at the target recorded here. No reader
// keeps a copy of its own.
package guests

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
)

// TokenKey is the key of the guest token in the Computer's Secret.
const TokenKey = "token"

// TokenSecret is the Computer's guest-token Secret (made by the Computer
// reconciler before the VM's first start, owned by the Computer).
func TokenSecret(c *dotsv1.Computer) client.ObjectKey {
	return client.ObjectKey{Namespace: c.Namespace, Name: dotsv1.GuestTokenSecretName(c.Name)}
}

// TokenIn is the guest token the Computer's token Secret holds: the one rule
// of a usable token for every reader of it. The Secret must be the
// Computer's own, and the token one the guest's config accepts
// (protocol.ValidateToken: at least protocol.MinTokenLength printable
// characters). Never quotes the token.
func TokenIn(c *dotsv1.Computer, sec *corev1.Secret) (string, error) {
	key := client.ObjectKeyFromObject(sec)
	if !metav1.IsControlledBy(sec, c) {
		return "", fmt.Errorf("secret %s exists and does not belong to Computer %s: delete or rename it", key, c.Name)
	}
	tok := string(sec.Data[TokenKey])
	if err := protocol.ValidateToken(tok); err != nil {
		return "", fmt.Errorf("secret %s has no usable %q key (at least %d printable characters): delete it and a new token is made", key, TokenKey, protocol.MinTokenLength)
	}
	return tok, nil
}

// Registry holds the guests of one host. The zero value is ready to use;
// it is safe for concurrent use.
type Registry struct {
	mu sync.Mutex
	// tokens holds each Computer's guest token by UID: it never changes
	// while the Computer lives, and reading it on every poll would cost an
	// API call per VM per look.
	tokens map[types.UID]string
	// targets holds each Dot's guest as last proven reachable.
	targets map[types.NamespacedName]guestclient.Target
}

// Token is the Computer's guest token: the one kept, else read from its
// Secret with reader (never cached: a host agent reads Secrets namespace by
// namespace) and kept. An error wraps the read's (apierrors.IsNotFound when
// there is no Secret yet).
func (g *Registry) Token(ctx context.Context, reader client.Reader, c *dotsv1.Computer) (string, error) {
	if tok, ok := g.kept(c.UID); ok {
		return tok, nil
	}
	key := TokenSecret(c)
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, key, sec); err != nil {
		return "", fmt.Errorf("read the guest-token secret %s: %w", key, err)
	}
	return g.Keep(c, sec)
}

// Keep keeps the token the Computer's Secret holds, when it is usable
// (TokenIn), and returns it.
func (g *Registry) Keep(c *dotsv1.Computer, sec *corev1.Secret) (string, error) {
	tok, err := TokenIn(c, sec)
	if err != nil {
		return "", err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tokens == nil {
		g.tokens = map[types.UID]string{}
	}
	g.tokens[c.UID] = tok
	return tok, nil
}

func (g *Registry) kept(uid types.UID) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tok, ok := g.tokens[uid]
	return tok, ok
}

// ForgetToken drops the token of a Computer that is gone.
func (g *Registry) ForgetToken(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.tokens, uid)
}

// Prove records the Dot's guest as reachable at t; a zero t records that it
// has none to reach.
func (g *Registry) Prove(key types.NamespacedName, t guestclient.Target) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t == (guestclient.Target{}) {
		delete(g.targets, key)
		return
	}
	if g.targets == nil {
		g.targets = map[types.NamespacedName]guestclient.Target{}
	}
	g.targets[key] = t
}

// Target is where the Dot's guest was proven reachable; false when it has
// none to reach now.
func (g *Registry) Target(key types.NamespacedName) (guestclient.Target, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.targets[key]
	return t, ok
}
