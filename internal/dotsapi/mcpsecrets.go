package dotsapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
)

// The subresource of a Dot's MCP secrets: dots-viewer may get which are
// set (never a value), dots-editor also update and delete them.
const mcpSecretsSubresource = "mcp-secrets"

// getMCPSecrets lists every secret the MCP servers of the Dot's config
// name, and whether a value is stored for each, read where the guest link
// reads them (keystore, hostagent/guestlink/secrets.go). No value leaves.
func (h *Handler) getMCPSecrets(w http.ResponseWriter, r *http.Request) error {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return err
	}
	ns, name := p[0], p[1]
	if err := h.authorizeDot(r, "get", mcpSecretsSubresource, ns, name); err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("the MCP secrets take no query parameters")
	}
	d, err := h.getDot(r.Context(), ns, name)
	if err != nil {
		return err
	}
	var data map[string][]byte
	if ref := d.Spec.SecretRef; ref != nil && ref.Name != "" {
		sec := &corev1.Secret{}
		err := h.dots.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: ref.Name}, sec)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("read the Secret %s/%s of Dot %s: %w", ns, ref.Name, name, err)
		default:
			data = sec.Data
		}
	}
	out := wire.MCPSecrets{Dot: dotRef(d), Secrets: []wire.MCPSecret{}}
	for _, s := range d.Spec.MCPServers {
		for _, sn := range s.Secrets {
			out.Secrets = append(out.Secrets, wire.MCPSecret{Server: s.Name, Name: sn, Set: len(data[dotsv1.MCPSecretKey(s.Name, sn)]) > 0})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// putMCPSecret stores one MCP secret the Dot's config names. The Dot is
// annotated with the change, which its host agent's guest link watches:
// a running guest is given the secrets again, and starts the server again
// with them, as soon as the watch tells the agent.
func (h *Handler) putMCPSecret(w http.ResponseWriter, r *http.Request) error {
	key, server, secret, err := h.mcpSecretRequest(r, "update")
	if err != nil {
		return err
	}
	var body wire.SetMCPSecret
	if err := decode(w, r, wire.MaxMCPSecretBody, &body); err != nil {
		return err
	}
	// The rule's words only: the value is never repeated.
	if err := protocol.ValidateMCPSecret(body.Value); err != nil {
		return badRequest("the value of secret %s of MCP server %s is refused: %s", secret, server, protocol.MCPSecretRule)
	}
	d, err := h.namedSecretDot(r, key, server, secret)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return apiErrorf(http.StatusConflict, wire.CodeDotDeleting, "the Dot %s is being deleted and takes no secrets", key)
	}
	stored, err := keystore.PutMCPSecret(r.Context(), h.writer, key, server, secret, body.Value)
	if err != nil {
		return fmt.Errorf("store secret %s of MCP server %s of Dot %s: %w", secret, server, key, err)
	}
	h.announced(key, stored)
	writeJSON(w, http.StatusOK, wire.MCPSecret{Server: server, Name: secret, Set: true})
	return nil
}

// deleteMCPSecret clears one MCP secret the Dot's config names; clearing
// one that is not set is no error.
func (h *Handler) deleteMCPSecret(w http.ResponseWriter, r *http.Request) error {
	key, server, secret, err := h.mcpSecretRequest(r, "delete")
	if err != nil {
		return err
	}
	if _, err := h.namedSecretDot(r, key, server, secret); err != nil {
		return err
	}
	stored, err := keystore.ClearMCPSecret(r.Context(), h.writer, key, server, secret)
	if err != nil {
		return fmt.Errorf("clear secret %s of MCP server %s of Dot %s: %w", secret, server, key, err)
	}
	h.announced(key, stored)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// mcpSecretRequest checks the caller and the path of a write.
func (h *Handler) mcpSecretRequest(r *http.Request, verb string) (types.NamespacedName, string, string, error) {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return types.NamespacedName{}, "", "", err
	}
	key := types.NamespacedName{Namespace: p[0], Name: p[1]}
	if err := h.authorizeDot(r, verb, mcpSecretsSubresource, key.Namespace, key.Name); err != nil {
		return key, "", "", err
	}
	if len(r.URL.Query()) > 0 {
		return key, "", "", badRequest("an MCP secret takes no query parameters")
	}
	if h.writer == nil {
		return key, "", "", apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not store MCP secrets")
	}
	server, secret := r.PathValue("server"), r.PathValue("secret")
	if problems := validation.IsConfigMapKey(dotsv1.MCPSecretKey(server, secret)); len(problems) > 0 {
		return key, "", "", badRequest("secret %q of MCP server %q cannot be stored: %s", secret, server, strings.Join(problems, "; "))
	}
	return key, server, secret, nil
}

// namedSecretDot reads the Dot and checks that its config names the secret:
// a secret no server names would never reach the guest.
func (h *Handler) namedSecretDot(r *http.Request, key types.NamespacedName, server, secret string) (*dotsv1.Dot, error) {
	d, err := h.getDot(r.Context(), key.Namespace, key.Name)
	if err != nil {
		return nil, err
	}
	for _, s := range d.Spec.MCPServers {
		if s.Name == server && slices.Contains(s.Secrets, secret) {
			return d, nil
		}
	}
	return nil, apiErrorf(http.StatusNotFound, wire.CodeNotFound, "the config of Dot %s names no secret %q of an MCP server %q (spec.mcpServers[].secrets)", key, secret, server)
}

// announced logs a Secret written whose Dot could not be annotated: its
// host agent then pushes the change at its next poll, not at once.
func (h *Handler) announced(key types.NamespacedName, stored keystore.Stored) {
	if stored.AnnounceError != nil {
		h.log.Error(stored.AnnounceError, "an MCP secret was stored and its Dot was not told: its host agent pushes it at its next poll", "dot", key.String())
	}
}
