package protocol

// Browser identities (ref 6, 5.3): the engine's routes under
// RouteBrowserIdents and the shapes both the engine and the host's
// pass-through use. The guest's database is the only record of which
// identities exist; the host never mirrors the list.

// Browser identity sub-routes: RouteBrowserIdents + "/" + id + one of these.
const (
	BrowserIdentityFrame = "/frame"
	BrowserIdentityClose = "/close"
)

// The engine's own limits (ref 6): not settings.
const (
	BrowserMaxOpen       = 3
	BrowserMaxIdentities = 20
	// BrowserNameMaxLen bounds an identity's name, in characters.
	BrowserNameMaxLen = 64
	// BrowserFrameWaitSeconds is how long a frame waits for the call in
	// flight on the identity before answering busy.
	BrowserFrameWaitSeconds = 5
)

// BrowserIdentity is one identity as a route answers it. It says whether it
// has a proxy and nothing of the proxy, which is a secret. Open is derived
// from the engine's live browser sessions, never stored.
type BrowserIdentity struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	HasProxy     bool   `json:"hasProxy"`
	Open         bool   `json:"open"`
	CreatedAtMS  int64  `json:"created_at_ms"`
	LastUsedAtMS *int64 `json:"last_used_at_ms"`
}

// BrowserIdentities is the answer of GET /browser-identities, oldest first.
type BrowserIdentities struct {
	Identities []BrowserIdentity `json:"identities"`
}

// BrowserIdentityCreate is the body of POST /browser-identities. Proxy is an
// explicit option: absent, null or blank means none, the normal case; a
// string is kept as written and judged by the browser at its launch.
type BrowserIdentityCreate struct {
	Name  string  `json:"name"`
	Proxy *string `json:"proxy,omitempty"`
}
