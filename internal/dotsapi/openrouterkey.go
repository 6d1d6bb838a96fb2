package dotsapi

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
)

// maxKeyBody bounds the body of the key route: a key is short.
const maxKeyBody = 8 << 10

// SetOpenRouterKey is the body of PUT /dots/v1/secrets/openrouter.
type SetOpenRouterKey struct {
	Key string `json:"key"`
}

// OpenRouterKeyStored answers it: where the key went, never the key.
type OpenRouterKeyStored struct {
	Secret  string `json:"secret"`
	Created bool   `json:"created"`
	// RunningDots is how many Dots whose computers run get the new key:
	// those without a key of their own, each announced to its host agent,
	// which pushes the key to the guest at once. Absent when they could not
	// be counted (they still get the key at their host agent's next poll).
	RunningDots *int `json:"running_dots,omitempty"`
}

// putOpenRouterKey stores the host-wide default key as `invisible-dots
// secret openrouter` does (keystore.StoreDefault, the key rule applied
// where the key enters), so the web client can set it with a write-only
// field. The caller must be allowed to update that Secret itself: the route
// gives nobody a right kubectl would not.
func (h *Handler) putOpenRouterKey(w http.ResponseWriter, r *http.Request) error {
	if h.writer == nil {
		return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not store keys")
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("the key route takes no query parameters")
	}
	u, err := callerOf(r)
	if err != nil {
		return err
	}
	if err := h.authorize(r.Context(), authorizer.AttributesRecord{
		User: u, Verb: "update", Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName,
		ResourceRequest: true, APIVersion: "v1", Resource: "secrets",
	}); err != nil {
		return err
	}
	var body SetOpenRouterKey
	if err := decode(w, r, maxKeyBody, &body); err != nil {
		return err
	}
	// CheckKey's errors never hold the key.
	key, err := keystore.CheckKey([]byte(body.Key))
	if err != nil {
		return badRequest("%v", err)
	}
	stored, err := keystore.StoreDefault(r.Context(), h.writer, key)
	if err != nil {
		return err
	}
	out := OpenRouterKeyStored{Secret: stored.Secret.String(), Created: stored.Created}
	if n, err := announceDefaultKey(r.Context(), h.writer); err != nil {
		// The key is stored: a count that failed is no failure of the store.
		h.log.Error(err, "the running Dots could not be told of the new default key; their host agents push it at their next poll")
	} else {
		out.RunningDots = &n
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// announceDefaultKey counts the Dots whose computers run and that use the
// default key (no key of their own), and annotates each with the default
// key's Secret's new version (dotsv1.SecretsChangedAnnotation), so that the
// guest link of its host pushes the new key to the guest at once rather
// than at its next poll.
func announceDefaultKey(ctx context.Context, c client.Client) (int, error) {
	def := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}, def); err != nil {
		return 0, fmt.Errorf("read the default key's Secret: %w", err)
	}
	var computers dotsv1.ComputerList
	if err := c.List(ctx, &computers); err != nil {
		return 0, fmt.Errorf("list the Computers: %w", err)
	}
	n := 0
	for i := range computers.Items {
		comp := &computers.Items[i]
		if comp.Status.State != dotsv1.ComputerRunning {
			continue
		}
		dot := &dotsv1.Dot{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(comp), dot); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return n, fmt.Errorf("read Dot %s: %w", client.ObjectKeyFromObject(comp), err)
		}
		if !metav1.IsControlledBy(comp, dot) {
			continue
		}
		own, err := hasOwnKey(ctx, c, dot)
		if err != nil {
			return n, err
		}
		if own {
			continue
		}
		n++
		if dot.Annotations[dotsv1.SecretsChangedAnnotation] == def.ResourceVersion {
			continue
		}
		before := dot.DeepCopy()
		if dot.Annotations == nil {
			dot.Annotations = map[string]string{}
		}
		dot.Annotations[dotsv1.SecretsChangedAnnotation] = def.ResourceVersion
		// The annotation alone: any version of the Dot takes it.
		if err := c.Patch(ctx, dot, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return n, fmt.Errorf("annotate Dot %s with the new default key: %w", client.ObjectKeyFromObject(dot), err)
		}
	}
	return n, nil
}

// hasOwnKey says whether the Dot's own Secret (spec.secretRef) holds a key,
// which wins over the default (hostagent/guestlink reads them so).
func hasOwnKey(ctx context.Context, c client.Client, dot *dotsv1.Dot) (bool, error) {
	ref := dot.Spec.SecretRef
	if ref == nil || ref.Name == "" {
		return false, nil
	}
	sec := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: dot.Namespace, Name: ref.Name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read Secret %s/%s (the spec.secretRef of Dot %s): %w", dot.Namespace, ref.Name, dot.Name, err)
	}
	return len(sec.Data[dotsv1.OpenRouterKeySecretKey]) > 0, nil
}
