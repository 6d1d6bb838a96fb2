package webui

// People's sign-in.
//
// With sign-in on, the web client acts for the person who signed in, never
// with the server's admin credential: a person gives the token `invisible-dots
// user add` made for them (or its kubeconfig), the server asks the API server
// who that is (a SelfSubjectReview made with the token itself: a token the
// API server does not accept is refused here), and keeps the token in a
// session of its memory. The browser holds only the session's name: a cookie
// of 256 random bits, HttpOnly (no script reads it), SameSite=Strict (no other
// site's page sends it) and Secure over HTTPS. Every proxied request then
// carries the person's token, so the API server's RBAC decides exactly as for
// their kubectl. Sessions live in the server's memory alone: a sign-out ends
// one at once (a copied cookie is refused after it), and so does the server's
// stop, after which people sign in again. The token is never written to a
// log, an error or the page.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// SessionPath is the web client's session: GET says whether sign-in is on
// and who is signed in, POST {"token"} or {"kubeconfig"} signs in, DELETE
// signs out.
const SessionPath = "/web/v1/session"

const (
	// SessionLifetime bounds a session, and the token's own expiry bounds
	// it sooner.
	SessionLifetime = 12 * time.Hour
	// cookieName is the session's cookie over plain HTTP (a loopback
	// address); over HTTPS it is secureCookieName, whose __Host- prefix
	// makes the browser refuse it unless Secure, for this host alone.
	cookieName       = "dots-session"
	secureCookieName = "__Host-dots-session"
	// maxSignInBody bounds a sign-in's body: a kubeconfig with its CA.
	maxSignInBody = 256 << 10
	// maxSessions bounds the memory sessions take; the oldest goes first.
	maxSessions = 4096
)

// Person is who a session acts for, as the page shows them.
type Person struct {
	// User is the name the API server knows them by.
	User string `json:"user"`
	// Name is the short name: a ServiceAccount's own name.
	Name string `json:"name"`
	// Namespace is the namespace the pages list, or "" when the person
	// may list every namespace's Dots.
	Namespace string `json:"namespace,omitempty"`
}

// SessionInfo is SessionPath's answer.
type SessionInfo struct {
	// SignIn says whether people sign in here; false: the web client acts
	// with the server's own credential, for the machine's owner.
	SignIn bool `json:"signIn"`
	// Person is who is signed in, nil when no one is.
	Person *Person `json:"person,omitempty"`
	// Expires is when the session ends.
	Expires *time.Time `json:"expires,omitempty"`
}

type session struct {
	id      string
	token   string
	person  Person
	expires time.Time
	made    time.Time
}

// signIn holds the sessions and checks the credentials people give.
type signIn struct {
	// anon reaches the API server with no credential of its own (its CA
	// only): each request adds the person's token.
	anon   *rest.Config
	secure bool
	now    func() time.Time

	mu       sync.Mutex
	sessions map[string]*session
}

func newSignIn(upstream *rest.Config, secure bool) *signIn {
	return &signIn{anon: rest.AnonymousClientConfig(upstream), secure: secure, now: time.Now, sessions: map[string]*session{}}
}

func (s *signIn) cookieName() string {
	if s.secure {
		return secureCookieName
	}
	return cookieName
}

type sessionKey struct{}

// sessionOf is the request's session, put there by the handler.
func sessionOf(ctx context.Context) *session {
	ss, _ := ctx.Value(sessionKey{}).(*session)
	return ss
}

// lookup is the request's live session, or why there is none.
func (s *signIn) lookup(r *http.Request) (*session, string) {
	c, err := r.Cookie(s.cookieName())
	if err != nil || c.Value == "" {
		return nil, "sign in first: open the web client's page and give your token"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[c.Value]
	switch {
	case ss == nil:
		return nil, "this session is not known here (it was signed out, or the server restarted since): sign in again"
	case !s.now().Before(ss.expires):
		delete(s.sessions, ss.id)
		return nil, "this session has ended (a session lasts until its token expires, at most " + SessionLifetime.String() + "): sign in again"
	}
	return ss, ""
}

// drop ends a session: signed out, or its token no longer accepted.
func (s *signIn) drop(ss *session) {
	s.mu.Lock()
	delete(s.sessions, ss.id)
	s.mu.Unlock()
}

// serve answers SessionPath.
func (s *signIn) serve(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		info := SessionInfo{SignIn: true}
		if ss, _ := s.lookup(r); ss != nil {
			p, exp := ss.person, ss.expires
			info.Person, info.Expires = &p, &exp
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, info)
	case http.MethodPost:
		s.signInWith(w, r)
	case http.MethodDelete:
		if ss, _ := s.lookup(r); ss != nil {
			s.drop(ss)
		}
		s.clearCookie(w)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the session is read with GET, made with POST and ended with DELETE")
	}
}

// signInRequest is a sign-in's body: a token, or a kubeconfig whose current
// context's user has one.
type signInRequest struct {
	Token      string `json:"token"`
	Kubeconfig string `json:"kubeconfig"`
}

func (s *signIn) signInWith(w http.ResponseWriter, r *http.Request) {
	var in signInRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSignInBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", `a sign-in is {"token": "..."} or {"kubeconfig": "..."}, at most 256 KiB`)
		return
	}
	token, hint, err := credentialOf(in)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	person, err := s.who(r.Context(), token, hint)
	if err != nil {
		var refused refusedError
		if errors.As(err, &refused) {
			writeError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		} else {
			writeError(w, http.StatusBadGateway, "api_unreachable", err.Error())
		}
		return
	}
	now := s.now()
	expires := now.Add(SessionLifetime)
	if exp, ok := tokenExpiry(token); ok && exp.Before(expires) {
		expires = exp
	}
	ss := &session{id: newSessionID(), token: token, person: person, expires: expires, made: now}
	s.mu.Lock()
	s.forgetOldest(now)
	s.sessions[ss.id] = ss
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: s.cookieName(), Value: ss.id, Path: "/", Expires: expires,
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, SessionInfo{SignIn: true, Person: &person, Expires: &expires})
}

// forgetOldest makes room for one more session: the ended ones go, then,
// when still full, the oldest.
func (s *signIn) forgetOldest(now time.Time) {
	if len(s.sessions) < maxSessions {
		return
	}
	var oldest *session
	for id, ss := range s.sessions {
		if !now.Before(ss.expires) {
			delete(s.sessions, id)
			continue
		}
		if oldest == nil || ss.made.Before(oldest.made) {
			oldest = ss
		}
	}
	if len(s.sessions) >= maxSessions && oldest != nil {
		delete(s.sessions, oldest.id)
	}
}

func (s *signIn) clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode})
}

// refusedError is the API server's refusal of a credential, as opposed to
// not reaching it.
type refusedError struct{ msg string }

func (e refusedError) Error() string { return e.msg }

// who asks the API server, with the token, who it stands for, and which
// namespace the person's pages list: every namespace when they may list
// the Dots of all, else their ServiceAccount's namespace or the one their
// kubeconfig names.
func (s *signIn) who(ctx context.Context, token, namespaceHint string) (Person, error) {
	cfg := rest.CopyConfig(s.anon)
	cfg.BearerToken = token
	cfg.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Person{}, fmt.Errorf("make a client of the API server: %w", err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	switch {
	case apierrors.IsUnauthorized(err):
		return Person{}, refusedError{"the API server does not accept this token: it expired, was revoked (its person's ServiceAccount deleted) or was not copied whole; ask for a new one ('invisible-dots user add NAME --namespace NS')"}
	case err != nil:
		return Person{}, fmt.Errorf("the API server did not answer who this token is (is invisible-dots server still running?): %s", apiReason(err))
	}
	u := review.Status.UserInfo
	p := Person{User: u.Username, Name: u.Username}
	if ns, name, err := serviceaccount.SplitUsername(u.Username); err == nil {
		p.Name, p.Namespace = name, ns
	}
	if namespaceHint != "" {
		p.Namespace = namespaceHint
	}
	everyNamespace, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
		Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
			Verb: "list", Group: "dots.invisible.dev", Resource: "dots",
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Person{}, fmt.Errorf("the API server did not answer what this token may list: %s", apiReason(err))
	}
	if everyNamespace.Status.Allowed {
		p.Namespace = ""
	} else if p.Namespace == "" {
		p.Namespace = "default"
	}
	return p, nil
}

// apiReason is an API error's words, which never hold the token.
func apiReason(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// credentialOf takes the token out of a sign-in, and the namespace a
// kubeconfig's context names.
func credentialOf(in signInRequest) (token, namespace string, err error) {
	switch {
	case in.Token != "" && in.Kubeconfig != "":
		return "", "", errors.New("give a token or a kubeconfig, not both")
	case in.Token != "":
		token = strings.TrimSpace(in.Token)
		if strings.HasPrefix(token, "Bearer ") {
			token = strings.TrimSpace(strings.TrimPrefix(token, "Bearer "))
		}
		if strings.ContainsAny(token, " \t\r\n") {
			return "", "", errors.New("a token is one line with no spaces: paste the token alone, or give the whole kubeconfig file instead")
		}
		return token, "", nil
	case in.Kubeconfig != "":
		cfg, err := clientcmd.Load([]byte(in.Kubeconfig))
		if err != nil {
			return "", "", fmt.Errorf("this is not a kubeconfig file (%v): give the file 'invisible-dots user add' wrote, or the token in it", err)
		}
		ctxName := cfg.CurrentContext
		kctx := cfg.Contexts[ctxName]
		if kctx == nil {
			return "", "", fmt.Errorf("the kubeconfig's current context %q is not among its contexts: give the file 'invisible-dots user add' wrote", ctxName)
		}
		user := cfg.AuthInfos[kctx.AuthInfo]
		switch {
		case user == nil:
			return "", "", fmt.Errorf("the kubeconfig's context %q names the user %q, which it does not hold", ctxName, kctx.AuthInfo)
		case user.Token != "":
			return user.Token, kctx.Namespace, nil
		case user.TokenFile != "":
			return "", "", fmt.Errorf("the kubeconfig's user %q reads its token from a file of its own machine (%s): paste that token instead", kctx.AuthInfo, user.TokenFile)
		default:
			return "", "", fmt.Errorf("the kubeconfig's user %q signs in with no token (a client certificate, or a program), which the web client cannot carry: give the kubeconfig 'invisible-dots user add' wrote, or a token", kctx.AuthInfo)
		}
	}
	return "", "", errors.New("give the token 'invisible-dots user add' made for you, or its kubeconfig file")
}

// tokenExpiry reads a JSON Web Token's exp claim, unverified: it only ends
// a session sooner, and the API server checks the token at every request.
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

func newSessionID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
