package dotsapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// browserIdentitiesSubresource is the Dot's browser identities (ref 6):
// dots-viewer and dots-editor get them and their frames; only an editor
// creates (create), closes (update) or deletes (delete) one. These are the
// owner's actions, not the Dot's, so no permission of the Dot applies (ref
// 5.3).
const browserIdentitiesSubresource = "browser-identities"

// browserCloseTimeout bounds a close or a delete: the engine asks the browser
// to close for up to 30 s so it flushes its profile, then stops its server
// (ref 6), which guestCallTimeout would cut.
const browserCloseTimeout = 90 * time.Second

// The guest's database is the only record of which identities exist (ref
// 6): every route asks the engine, and the control plane keeps no copy.

// listBrowserIdentities passes the engine's GET /browser-identities through.
func (h *Handler) listBrowserIdentities(w http.ResponseWriter, r *http.Request) error {
	var out protocol.BrowserIdentities
	if err := h.engineGet(r, browserIdentitiesSubresource, protocol.RouteBrowserIdents, &out); err != nil {
		return err
	}
	if out.Identities == nil {
		out.Identities = []protocol.BrowserIdentity{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getBrowserIdentity passes the engine's GET /browser-identities/{id}
// through.
func (h *Handler) getBrowserIdentity(w http.ResponseWriter, r *http.Request) error {
	id, err := identityOf(r)
	if err != nil {
		return err
	}
	var out protocol.BrowserIdentity
	if err := h.engineGet(r, browserIdentitiesSubresource, identityRoute(id, ""), &out); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// createBrowserIdentity passes a person's create through (ref 9.6). The
// proxy is write-only: it goes to the engine, which stores it as a secret,
// and nothing here repeats, logs or keeps it; the answer says only hasProxy.
// What a valid name or proxy is is the engine's rule (400 invalid, 409
// limit), passed through.
func (h *Handler) createBrowserIdentity(w http.ResponseWriter, r *http.Request) error {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return err
	}
	ns, name := p[0], p[1]
	if err := h.authorizeDot(r, "create", browserIdentitiesSubresource, ns, name); err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("%s takes no query parameters", r.URL.Path)
	}
	var body protocol.BrowserIdentityCreate
	if err := decode(w, r, wire.MaxBrowserIdentityBody, &body); err != nil {
		return err
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	g, err := h.guestOf(r.Context(), ns, name)
	if err != nil {
		return err
	}
	path := protocol.AgentRoutePrefix + protocol.RouteBrowserIdents
	q := guestRequest{method: http.MethodPost, path: path, body: data, want: http.StatusCreated}
	if body.Proxy != nil {
		q.secret = *body.Proxy
	}
	resp, cancel, err := h.guestCall(r.Context(), g, q)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	var out protocol.BrowserIdentity
	if err := decodeAnswer(resp, path, &out); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// deleteBrowserIdentity passes the engine's DELETE /browser-identities/{id}
// through: its browser is closed and its profile removed.
func (h *Handler) deleteBrowserIdentity(w http.ResponseWriter, r *http.Request) error {
	return h.browserAction(w, r, "delete", http.MethodDelete, "")
}

// closeBrowserIdentity passes the engine's POST
// /browser-identities/{id}/close through: the browser ends, the profile
// stays; closing a closed identity is a 204 too.
func (h *Handler) closeBrowserIdentity(w http.ResponseWriter, r *http.Request) error {
	return h.browserAction(w, r, "update", http.MethodPost, protocol.BrowserIdentityClose)
}

// browserAction sends an identity's delete or close to the engine, whose
// success is a 204.
func (h *Handler) browserAction(w http.ResponseWriter, r *http.Request, verb, method, sub string) error {
	id, err := identityOf(r)
	if err != nil {
		return err
	}
	g, err := h.guestFor(r, verb, browserIdentitiesSubresource)
	if err != nil {
		return err
	}
	resp, cancel, err := h.guestCall(r.Context(), g, guestRequest{method: method, path: protocol.AgentRoutePrefix + identityRoute(id, sub),
		want: http.StatusNoContent, timeout: browserCloseTimeout})
	if err != nil {
		return err
	}
	cancel()
	resp.Body.Close()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// browserFrame answers one frame of an open identity's window as the
// engine's GET /browser-identities/{id}/frame gives it; the engine's
// refusals (not_found, not_open, busy, frame_failed, crashed) pass through.
// The answer is typed image/jpeg only when it is one: the engine owns that
// rule, and a guest is untrusted from here.
func (h *Handler) browserFrame(w http.ResponseWriter, r *http.Request) error {
	id, err := identityOf(r)
	if err != nil {
		return err
	}
	g, err := h.guestFor(r, "get", browserIdentitiesSubresource)
	if err != nil {
		return err
	}
	return h.passImage(w, r, g, protocol.AgentRoutePrefix+identityRoute(id, protocol.BrowserIdentityFrame), "frame", jpegImage)
}

// identityOf reads the identity's id from the path. Its form is the
// engine's (a slug of its name and a suffix); this only keeps out what could
// not be one segment of the engine's route.
func identityOf(r *http.Request) (string, error) {
	id := r.PathValue("identity")
	if id == "" || len(id) > 200 || printable(id, 200) != id {
		return "", badRequest("the browser identity id %q in the path is not valid: it must be 1 to 200 printable ASCII characters", printable(id, 40))
	}
	return id, nil
}

// identityRoute is the engine's route of the identity id, then sub.
func identityRoute(id, sub string) string {
	return protocol.RouteBrowserIdents + "/" + url.PathEscape(id) + sub
}
