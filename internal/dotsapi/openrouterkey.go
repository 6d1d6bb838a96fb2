package dotsapi

import (
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
)

// maxKeyBody bounds the body of the key route: a key is short.
const maxKeyBody = 8 << 10

// SetOpenRouterKey is the body of PUT /dots/v1/secrets/openrouter (the
// host-wide default key) and of PUT .../dots/{name}/secrets/openrouter (a
// Dot's own, ref 9.6's dot_id: its namespace and name in the path, so a
// person's role over the Dot's paths reaches it).
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
	if n, err := keystore.AnnounceDefault(r.Context(), h.writer); err != nil {
		// The key is stored: a count that failed is no failure of the store.
		h.log.Error(err, "the running Dots could not be told of the new default key; their host agents push it at their next poll")
	} else {
		out.RunningDots = &n
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// putDotOpenRouterKey stores a Dot's own key, in the Secret its
// spec.secretRef names (made and named when it has none), as `invisible-dots
// secret openrouter --dot` does. The right asked is the one over the Dot's
// secrets (update on dots/mcp-secrets: dots-editor has it), not over
// Secrets at large. It answers running_dots 1 when the Dot's computer runs:
// the Dot is annotated with the change, so its host agent pushes the key to
// the guest at once.
func (h *Handler) putDotOpenRouterKey(w http.ResponseWriter, r *http.Request) error {
	if h.writer == nil {
		return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not store keys")
	}
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return err
	}
	dotKey := types.NamespacedName{Namespace: p[0], Name: p[1]}
	if err := h.authorizeDot(r, "update", mcpSecretsSubresource, dotKey.Namespace, dotKey.Name); err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("the key route takes no query parameters")
	}
	var body SetOpenRouterKey
	if err := decode(w, r, maxKeyBody, &body); err != nil {
		return err
	}
	key, err := keystore.CheckKey([]byte(body.Key))
	if err != nil {
		return badRequest("%v", err)
	}
	d, err := h.getDot(r.Context(), dotKey.Namespace, dotKey.Name)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return apiErrorf(http.StatusConflict, wire.CodeDotDeleting, "the Dot %s is being deleted and takes no key", dotKey)
	}
	stored, err := keystore.StoreForDot(r.Context(), h.writer, dotKey, key)
	if err != nil {
		return fmt.Errorf("store the OpenRouter key of Dot %s: %w", dotKey, err)
	}
	out := OpenRouterKeyStored{Secret: stored.Secret.String(), Created: stored.Created}
	if stored.AnnounceError != nil {
		// Stored; its host agent pushes it at its next poll instead.
		h.log.Error(stored.AnnounceError, "a Dot's key was stored and the Dot was not told: its host agent pushes it at its next poll", "dot", dotKey.String())
	} else {
		n := 0
		comp := &dotsv1.Computer{}
		if err := h.dots.Get(r.Context(), dotKey, comp); err == nil && metav1.IsControlledBy(comp, d) && comp.Status.State == dotsv1.ComputerRunning {
			n = 1
		}
		out.RunningDots = &n
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
