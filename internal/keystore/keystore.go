// Package keystore stores the OpenRouter key where the host agents' guest
// links read it (ref 4.3): the host-wide default, a Secret in the system
// namespace, or a Dot's own Secret, which its spec.secretRef names and which
// wins over the default. The key is taken from standard input only and
// checked against the protocol's key rule where it enters; it is never
// printed, logged or put in an error.
package keystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// maxKeyBytes bounds what is read from standard input: a key is short.
const maxKeyBytes = 4096

// ErrNoKey: standard input held nothing.
var ErrNoKey = errors.New("no key on standard input: pipe it in (printf '%s' \"$OPENROUTER_API_KEY\" | invisible-dots secret openrouter) or type it when asked")

// ReadKey reads the key from in: the whole input, less one final line end,
// checked against the key rule. Its errors never hold the input.
func ReadKey(in io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(in, maxKeyBytes+1))
	if err != nil {
		return "", fmt.Errorf("read the key from standard input: %w", err)
	}
	if len(b) > maxKeyBytes {
		return "", fmt.Errorf("standard input holds more than %d bytes, which is no OpenRouter key", maxKeyBytes)
	}
	return CheckKey(b)
}

// CheckKey applies the key rule to what was read (a terminal's line or a
// pipe's bytes), less one final line end.
func CheckKey(b []byte) (string, error) {
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return "", ErrNoKey
	}
	key := string(b)
	if err := protocol.ValidateOpenRouterKey(key); err != nil {
		return "", fmt.Errorf("%w (what was read is not stored)", err)
	}
	return key, nil
}

// Stored says where a key went.
type Stored struct {
	// Secret is the Secret holding the key.
	Secret types.NamespacedName
	// Created: the Secret was made by this call.
	Created bool
	// RefSet: the Dot had no spec.secretRef, and now names Secret.
	RefSet bool
}

// StoreDefault stores key as the host-wide default, the key of every Dot
// without one of its own.
func StoreDefault(ctx context.Context, c client.Client, key string) (Stored, error) {
	name := types.NamespacedName{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}
	created, err := putKey(ctx, c, name, key, nil)
	if err != nil {
		return Stored{}, err
	}
	return Stored{Secret: name, Created: created}, nil
}

// DotSecretName is the Secret made for a Dot that names none.
func DotSecretName(dot string) string { return dot + "-secrets" }

// StoreForDot stores key as the Dot's own, in the Secret its spec.secretRef
// names; a Dot that names none gets DotSecretName, owned by the Dot (it goes
// with it), and its spec.secretRef set to it.
func StoreForDot(ctx context.Context, c client.Client, dotKey types.NamespacedName, key string) (Stored, error) {
	// A Dot just applied is still being written by its controllers: a
	// conflict reads it again and tries again.
	var stored Stored
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		stored, err = storeForDot(ctx, c, dotKey, key)
		return err
	})
	return stored, err
}

func storeForDot(ctx context.Context, c client.Client, dotKey types.NamespacedName, key string) (Stored, error) {
	dot := &dotsv1.Dot{}
	if err := c.Get(ctx, dotKey, dot); err != nil {
		if apierrors.IsNotFound(err) {
			return Stored{}, fmt.Errorf("there is no Dot %s in namespace %s", dotKey.Name, dotKey.Namespace)
		}
		return Stored{}, fmt.Errorf("read Dot %s: %w", dotKey, err)
	}
	var owner *metav1.OwnerReference
	name := types.NamespacedName{Namespace: dot.Namespace}
	refSet := false
	if ref := dot.Spec.SecretRef; ref != nil && ref.Name != "" {
		name.Name = ref.Name
	} else {
		name.Name = DotSecretName(dot.Name)
		owner = &metav1.OwnerReference{APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: dot.Name, UID: dot.UID, BlockOwnerDeletion: ptr.To(false)}
		refSet = true
	}
	created, err := putKey(ctx, c, name, key, owner)
	if err != nil {
		return Stored{}, err
	}
	if refSet {
		before := dot.DeepCopy()
		dot.Spec.SecretRef = &dotsv1.SecretReference{Name: name.Name}
		// Over the version read: a secretRef set meanwhile is not replaced.
		if err := c.Patch(ctx, dot, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return Stored{}, fmt.Errorf("set spec.secretRef of Dot %s to %s (the key is stored in Secret %s): %w", dotKey, name.Name, name, err)
		}
	}
	return Stored{Secret: name, Created: created, RefSet: refSet}, nil
}

// putKey writes key under dotsv1.OpenRouterKeySecretKey, keeping the
// Secret's other keys (a Dot's MCP secrets). A Secret made here is Opaque
// and, when owner is set, owned by it; an existing Secret made for a Dot
// (owner set) must be that Dot's.
func putKey(ctx context.Context, c client.Client, name types.NamespacedName, key string, owner *metav1.OwnerReference) (bool, error) {
	sec := &corev1.Secret{}
	err := c.Get(ctx, name, sec)
	if apierrors.IsNotFound(err) {
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name.Name, Namespace: name.Namespace},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{dotsv1.OpenRouterKeySecretKey: []byte(key)},
		}
		if owner != nil {
			sec.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		if err := c.Create(ctx, sec); err != nil {
			return false, fmt.Errorf("create Secret %s: %w", name, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read Secret %s: %w", name, err)
	}
	if owner != nil && !ownedBy(sec, owner.UID) {
		return false, fmt.Errorf("the Secret %s exists and does not belong to Dot %s: set the Dot's spec.secretRef to a Secret of your choice, or remove that one", name, owner.Name)
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	sec.Data[dotsv1.OpenRouterKeySecretKey] = []byte(key)
	if err := c.Update(ctx, sec); err != nil {
		return false, fmt.Errorf("update Secret %s: %w", name, err)
	}
	return false, nil
}

func ownedBy(o metav1.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}
