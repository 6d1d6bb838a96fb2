// Package keystore stores the OpenRouter key and a Dot's MCP secrets where
// the host agents' guest links read them (ref 4.3): the host-wide default
// key, a Secret in the system namespace, or a Dot's own Secret, which its
// spec.secretRef names, whose key wins over the default and which holds its
// MCP secrets. The key is taken from standard input only and checked
// against the protocol's key rule where it enters; no key or secret is ever
// printed, logged or put in an error.
package keystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
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

// Stored says where a key or a secret went.
type Stored struct {
	// Secret is the Secret holding it; empty when nothing was written (a
	// secret cleared that was never stored).
	Secret types.NamespacedName
	// Created: the Secret was made by this call.
	Created bool
	// RefSet: the Dot had no spec.secretRef, and now names Secret.
	RefSet bool
	// AnnounceError is why the Dot could not be annotated with the change
	// (dotsv1.SecretsChangedAnnotation) although the Secret was written:
	// its host agent then pushes it at its next poll instead of at once.
	AnnounceError error
}

// StoreDefault stores key as the host-wide default, the key of every Dot
// without one of its own.
func StoreDefault(ctx context.Context, c client.Client, key string) (Stored, error) {
	name := types.NamespacedName{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}
	created, _, err := putData(ctx, c, name, nil, true, func(data map[string][]byte) bool {
		data[dotsv1.OpenRouterKeySecretKey] = []byte(key)
		return true
	})
	if err != nil {
		return Stored{}, err
	}
	return Stored{Secret: name, Created: created}, nil
}

// DefaultKeyStored says whether the host-wide default key is stored (never
// the key): what the server's health and doctor report.
func DefaultKeyStored(ctx context.Context, r client.Reader) (bool, error) {
	sec := &corev1.Secret{}
	err := r.Get(ctx, types.NamespacedName{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the default key's Secret %s/%s: %w", dotsv1.SystemNamespace, dotsv1.DefaultKeySecretName, err)
	}
	return len(sec.Data[dotsv1.OpenRouterKeySecretKey]) > 0, nil
}

// DotSecretName is the Secret made for a Dot that names none.
func DotSecretName(dot string) string { return dot + "-secrets" }

// StoreForDot stores key as the Dot's own, in the Secret its spec.secretRef
// names; a Dot that names none gets DotSecretName, owned by the Dot (it goes
// with it), and its spec.secretRef set to it.
func StoreForDot(ctx context.Context, c client.Client, dotKey types.NamespacedName, key string) (Stored, error) {
	return writeDotSecret(ctx, c, dotKey, true, func(data map[string][]byte) bool {
		data[dotsv1.OpenRouterKeySecretKey] = []byte(key)
		return true
	})
}

// PutMCPSecret stores value as the secret name of the Dot's MCP server
// server, in the Secret StoreForDot writes, under dotsv1.MCPSecretKey: the
// one place and format the guest link reads MCP secrets from
// (hostagent/guestlink/secrets.go). The caller has checked that the Dot's
// config names the secret and that value keeps protocol.MCPSecretRule.
func PutMCPSecret(ctx context.Context, c client.Client, dotKey types.NamespacedName, server, name, value string) (Stored, error) {
	key := dotsv1.MCPSecretKey(server, name)
	return writeDotSecret(ctx, c, dotKey, true, func(data map[string][]byte) bool {
		if v, ok := data[key]; ok && string(v) == value {
			return false
		}
		data[key] = []byte(value)
		return true
	})
}

// ClearMCPSecret removes the secret name of the Dot's MCP server server. A
// Dot without a Secret, or without that secret, has nothing to clear: no
// Secret is made for it.
func ClearMCPSecret(ctx context.Context, c client.Client, dotKey types.NamespacedName, server, name string) (Stored, error) {
	key := dotsv1.MCPSecretKey(server, name)
	return writeDotSecret(ctx, c, dotKey, false, func(data map[string][]byte) bool {
		if _, ok := data[key]; !ok {
			return false
		}
		delete(data, key)
		return true
	})
}

// dotWriteBackoff spans the seconds in which a Dot just applied is written
// by its controllers again and again (its status as its computer starts):
// client-go's DefaultRetry (five tries 10 ms apart) ran out there under load.
var dotWriteBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: time.Second}

// writeDotSecret changes the data of the Dot's own Secret with change,
// which reports whether it changed anything, making the Secret (and naming
// it in spec.secretRef) when create is set and the Dot has none. Then it
// annotates the Dot with the Secret's new resourceVersion, so the guest
// link of its host pushes the change to a running guest at once.
func writeDotSecret(ctx context.Context, c client.Client, dotKey types.NamespacedName, create bool, change func(map[string][]byte) bool) (Stored, error) {
	// A Dot just applied is still being written by its controllers: a
	// conflict reads it again and tries again.
	var stored Stored
	err := retry.RetryOnConflict(dotWriteBackoff, func() error {
		var err error
		stored, err = writeDotSecretOnce(ctx, c, dotKey, create, change)
		return err
	})
	return stored, err
}

func writeDotSecretOnce(ctx context.Context, c client.Client, dotKey types.NamespacedName, create bool, change func(map[string][]byte) bool) (Stored, error) {
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
		if !create {
			return Stored{}, nil
		}
		name.Name = DotSecretName(dot.Name)
		owner = &metav1.OwnerReference{APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: dot.Name, UID: dot.UID, BlockOwnerDeletion: ptr.To(false)}
		refSet = true
	}
	created, version, err := putData(ctx, c, name, owner, create, change)
	if err != nil {
		return Stored{}, err
	}
	stored := Stored{Secret: name, Created: created, RefSet: refSet}
	if version == "" && !refSet {
		// Nothing changed: nothing to push.
		return stored, nil
	}
	before := dot.DeepCopy()
	if version != "" {
		if dot.Annotations == nil {
			dot.Annotations = map[string]string{}
		}
		dot.Annotations[dotsv1.SecretsChangedAnnotation] = version
	}
	if refSet {
		dot.Spec.SecretRef = &dotsv1.SecretReference{Name: name.Name}
		// Over the version read: a secretRef set meanwhile is not replaced.
		if err := c.Patch(ctx, dot, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return Stored{}, fmt.Errorf("set spec.secretRef of Dot %s to %s (the value is stored in Secret %s): %w", dotKey, name.Name, name, err)
		}
		return stored, nil
	}
	// The annotation alone: any version of the Dot takes it.
	if err := c.Patch(ctx, dot, client.MergeFrom(before)); err != nil {
		stored.AnnounceError = fmt.Errorf("annotate Dot %s with the change of Secret %s: %w", dotKey, name, err)
	}
	return stored, nil
}

// putData changes the data of the Secret name with change, keeping its
// other keys. A Secret made here (only when create is set) is Opaque and,
// when owner is set, owned by it; an existing Secret made for a Dot (owner
// set) must be that Dot's. It returns the Secret's new resourceVersion, ""
// when change changed nothing.
func putData(ctx context.Context, c client.Client, name types.NamespacedName, owner *metav1.OwnerReference, create bool, change func(map[string][]byte) bool) (created bool, version string, err error) {
	sec := &corev1.Secret{}
	err = c.Get(ctx, name, sec)
	if apierrors.IsNotFound(err) {
		if !create {
			return false, "", nil
		}
		data := map[string][]byte{}
		if !change(data) {
			return false, "", nil
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name.Name, Namespace: name.Namespace},
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}
		if owner != nil {
			sec.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		if err := c.Create(ctx, sec); err != nil {
			return false, "", fmt.Errorf("create Secret %s: %w", name, err)
		}
		return true, sec.ResourceVersion, nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read Secret %s: %w", name, err)
	}
	if owner != nil && !ownedBy(sec, owner.UID) {
		return false, "", fmt.Errorf("the Secret %s exists and does not belong to Dot %s: set the Dot's spec.secretRef to a Secret of your choice, or remove that one", name, owner.Name)
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	if !change(sec.Data) {
		return false, "", nil
	}
	if err := c.Update(ctx, sec); err != nil {
		return false, "", fmt.Errorf("update Secret %s: %w", name, err)
	}
	return false, sec.ResourceVersion, nil
}

func ownedBy(o metav1.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}
