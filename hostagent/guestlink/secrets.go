package guestlink

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// StoreKeyCommand is the command that stores the host-wide default key; a
// Dot that has no key anywhere says it.
const StoreKeyCommand = "invisible-dots secret openrouter"

// secretSet is what POST /v1/agent/secrets carries for a Dot, where its key
// came from, and a digest of it. The digest lives in memory only: it tells a
// changed Secret from the one pushed, and is never written anywhere.
type secretSet struct {
	req protocol.SecretsRequest
	// keyFrom names the Secret the key came from ("Secret ns/name").
	keyFrom string
	digest  [sha256.Size]byte
}

// keyProblem is why no secrets can be pushed: there is no key (NoKey), or
// what is stored cannot be used or read (KeyUnusable). Its message never
// holds a value.
type keyProblem struct {
	reason, message string
}

// readSecrets reads the Dot's key and MCP secrets with the API reader: a host
// agent may read Secrets only in the namespaces where it has Computers, and
// the one default key's Secret in the system namespace, so it neither lists
// nor watches them. The Dot's own key (spec.secretRef) wins over the default.
func readSecrets(ctx context.Context, r client.Reader, dot *dotsv1.Dot) (secretSet, *keyProblem) {
	var own *corev1.Secret
	if ref := dot.Spec.SecretRef; ref != nil && ref.Name != "" {
		sec := &corev1.Secret{}
		err := r.Get(ctx, client.ObjectKey{Namespace: dot.Namespace, Name: ref.Name}, sec)
		switch {
		case apierrors.IsNotFound(err):
			// Not made yet: the default key may serve, and no MCP secret is set.
		case err != nil:
			return secretSet{}, &keyProblem{dotsv1.KeyUnusableReason, fmt.Sprintf("read Secret %s/%s (spec.secretRef): %v", dot.Namespace, ref.Name, err)}
		default:
			own = sec
		}
	}

	var set secretSet
	if own != nil && len(own.Data[dotsv1.OpenRouterKeySecretKey]) > 0 {
		set.req.OpenRouterAPIKey = string(own.Data[dotsv1.OpenRouterKeySecretKey])
		set.keyFrom = fmt.Sprintf("Secret %s/%s", own.Namespace, own.Name)
	} else {
		def := &corev1.Secret{}
		err := r.Get(ctx, client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}, def)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && len(def.Data[dotsv1.OpenRouterKeySecretKey]) == 0):
			return secretSet{}, &keyProblem{dotsv1.NoKeyReason, fmt.Sprintf(
				"no OpenRouter key is stored: run %q (the key on standard input) for every Dot of the host, or %q for this Dot alone",
				StoreKeyCommand, StoreKeyCommand+" --dot "+dot.Name+" -n "+dot.Namespace)}
		case err != nil:
			return secretSet{}, &keyProblem{dotsv1.KeyUnusableReason, fmt.Sprintf("read the default key's Secret %s/%s: %v", dotsv1.SystemNamespace, dotsv1.DefaultKeySecretName, err)}
		}
		set.req.OpenRouterAPIKey = string(def.Data[dotsv1.OpenRouterKeySecretKey])
		set.keyFrom = fmt.Sprintf("Secret %s/%s", dotsv1.SystemNamespace, dotsv1.DefaultKeySecretName)
	}
	if err := protocol.ValidateOpenRouterKey(set.req.OpenRouterAPIKey); err != nil {
		return secretSet{}, &keyProblem{dotsv1.KeyUnusableReason, fmt.Sprintf("the key in %s cannot be used: %v; store it again with %q", set.keyFrom, err, StoreKeyCommand)}
	}

	// Only the MCP secrets the configuration names, and only those set; the
	// map is always sent, empty when none is, so that a secret cleared or no
	// longer named is dropped by the engine too (ref 4.3).
	set.req.MCPSecrets = map[string]map[string]string{}
	if own != nil {
		for _, s := range dot.Spec.MCPServers {
			for _, name := range s.Secrets {
				v, ok := own.Data[dotsv1.MCPSecretKey(s.Name, name)]
				if !ok {
					continue
				}
				if set.req.MCPSecrets[s.Name] == nil {
					set.req.MCPSecrets[s.Name] = map[string]string{}
				}
				set.req.MCPSecrets[s.Name][name] = string(v)
			}
		}
	}
	if err := set.req.Validate(); err != nil {
		return secretSet{}, &keyProblem{dotsv1.KeyUnusableReason, fmt.Sprintf("Secret %s/%s cannot be used: %v", dot.Namespace, own.Name, err)}
	}
	b, err := json.Marshal(set.req)
	if err != nil {
		return secretSet{}, &keyProblem{dotsv1.KeyUnusableReason, "encode the secrets: " + err.Error()}
	}
	set.digest = sha256.Sum256(b)
	return set, nil
}

// mcpCount is how many MCP secrets a set carries.
func (s secretSet) mcpCount() int {
	n := 0
	for _, m := range s.req.MCPSecrets {
		n += len(m)
	}
	return n
}
