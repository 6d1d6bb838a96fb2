package webui

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
)

// fakeAPIServer stands in for the API server at the edge of these tests:
// it knows some tokens (each a user, and whether it may list every
// namespace's Dots), answers the two reviews a sign-in makes, and records
// the credential every other request carried.
type fakeAPIServer struct {
	mu    sync.Mutex
	users map[string]fakeUser
	seen  []string // "Authorization header path"
	// reject answers 401 to every request but the reviews (a token revoked
	// after the sign-in).
	reject bool
}

type fakeUser struct {
	name         string
	listEveryOne bool
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	u, known := f.users[strings.TrimPrefix(auth, "Bearer ")]
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/selfsubjectreviews":
		if !known {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
			return
		}
		fmt.Fprintf(w, `{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","status":{"userInfo":{"username":%q}}}`, u.name)
		return
	case "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
		fmt.Fprintf(w, `{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{},"status":{"allowed":%v}}`, u.listEveryOne)
		return
	}
	f.mu.Lock()
	f.seen = append(f.seen, auth+" "+r.URL.RequestURI())
	reject := f.reject
	f.mu.Unlock()
	if reject || !known {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","reason":"Unauthorized","code":401}`)
		return
	}
	if r.URL.Path == "/dots/v1/stream" {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "id: 7\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	if r.URL.Query().Get("watch") == "1" {
		_, _ = io.WriteString(w, `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	_, _ = io.WriteString(w, `{"kind":"DotList"}`)
}

func (f *fakeAPIServer) lastSeen() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		return ""
	}
	return f.seen[len(f.seen)-1]
}

// aJWT is a token shaped as a ServiceAccount's, expiring at exp.
func aJWT(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"exp":%d}`, exp.Unix()))) + ".c2ln"
}

func newSignInHandler(t *testing.T, secure bool) (*handler, *fakeAPIServer) {
	t.Helper()
	fake := &fakeAPIServer{users: map[string]fakeUser{
		"alice-token":                   {name: "system:serviceaccount:team:alice"},
		"owner-token":                   {name: "admin", listEveryOne: true},
		aJWT(time.Now().Add(time.Hour)): {name: "system:serviceaccount:team:bob"},
	}}
	api := httptest.NewServer(fake)
	t.Cleanup(api.Close)
	h, err := NewHandler(Options{
		Upstream: &rest.Config{Host: api.URL, BearerToken: "the-server-token"},
		Files:    fstest.MapFS{"index.html": {Data: []byte("<p>app</p>")}},
		SignIn:   true,
		Secure:   secure,
		Log:      logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h.(*handler), fake
}

func do(h http.Handler, method, path, body string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://dots.example:3000"+path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func signInAs(t *testing.T, h http.Handler, body string) (*http.Cookie, SessionInfo) {
	t.Helper()
	w := do(h, http.MethodPost, SessionPath, body)
	if w.Code != http.StatusOK {
		t.Fatalf("sign-in with %s: %d %s", body, w.Code, w.Body)
	}
	var info SessionInfo
	if err := json.Unmarshal(w.Body.Bytes(), &info); err != nil {
		t.Fatal(err)
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("sign-in set %d cookies, want 1", len(cookies))
	}
	return cookies[0], info
}

func TestSignInCarriesThePersonsTokenAndNeverTheServers(t *testing.T) {
	h, fake := newSignInHandler(t, false)

	// Before a sign-in: the page is served, the API is not.
	if w := do(h, http.MethodGet, "/", ""); w.Code != http.StatusOK {
		t.Fatalf("the page before a sign-in: %d", w.Code)
	}
	w := do(h, http.MethodGet, "/apis/dots.invisible.dev/v1alpha1/dots", "")
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "sign in first") {
		t.Fatalf("the API before a sign-in: %d %s; want 401 saying to sign in", w.Code, w.Body)
	}
	if got := fake.lastSeen(); got != "" {
		t.Fatalf("a request reached the API server before a sign-in: %q", got)
	}
	var info SessionInfo
	if err := json.Unmarshal(do(h, http.MethodGet, SessionPath, "").Body.Bytes(), &info); err != nil || !info.SignIn || info.Person != nil {
		t.Fatalf("the session before a sign-in: %+v, %v; want sign-in on and no one", info, err)
	}

	cookie, info := signInAs(t, h, `{"token":"alice-token"}`)
	if info.Person == nil || info.Person.Name != "alice" || info.Person.Namespace != "team" || info.Person.User != "system:serviceaccount:team:alice" {
		t.Errorf("signed in as %+v; want alice of namespace team", info.Person)
	}
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Secure || cookie.Name != "dots-session" || cookie.Path != "/" {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure over HTTP, path /", cookie)
	}
	if strings.Contains(cookie.Value, "alice-token") || len(cookie.Value) < 40 {
		t.Errorf("the cookie %q holds the token or too few random bits", cookie.Value)
	}
	if w := do(h, http.MethodGet, "/apis/dots.invisible.dev/v1alpha1/namespaces/team/dots", "", cookie); w.Code != http.StatusOK {
		t.Fatalf("the API after the sign-in: %d %s", w.Code, w.Body)
	}
	if got := fake.lastSeen(); got != "Bearer alice-token /apis/dots.invisible.dev/v1alpha1/namespaces/team/dots" {
		t.Errorf("the API server saw %q; want alice's token", got)
	}
	// A credential the browser sends is never passed on.
	r := httptest.NewRequest(http.MethodGet, "http://dots.example:3000/api/v1/namespaces", nil)
	r.AddCookie(cookie)
	r.Header.Set("Authorization", "Bearer owner-token")
	r.Header.Set("Impersonate-User", "admin")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got := fake.lastSeen(); got != "Bearer alice-token /api/v1/namespaces" {
		t.Errorf("the API server saw %q; want alice's token, not the one the browser sent", got)
	}

	var after SessionInfo
	_ = json.Unmarshal(do(h, http.MethodGet, SessionPath, "", cookie).Body.Bytes(), &after)
	if after.Person == nil || after.Person.Name != "alice" || after.Expires == nil {
		t.Errorf("the session after the sign-in: %+v; want alice and when it ends", after)
	}

	// A sign-out ends the session: the same cookie is refused after it.
	if w := do(h, http.MethodDelete, SessionPath, "", cookie); w.Code != http.StatusNoContent {
		t.Fatalf("sign-out: %d", w.Code)
	}
	w = do(h, http.MethodGet, "/apis/dots.invisible.dev/v1alpha1/dots", "", cookie)
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "sign in again") {
		t.Errorf("the cookie after a sign-out: %d %s; want 401", w.Code, w.Body)
	}
	for _, s := range fake.seen {
		if strings.Contains(s, "the-server-token") {
			t.Errorf("the server's own credential reached the API server: %q", s)
		}
	}
}

func TestSignInRefusals(t *testing.T) {
	h, _ := newSignInHandler(t, false)
	for body, want := range map[string]string{
		`{"token":"guessed"}`:             "does not accept this token",
		`{}`:                              "give the token",
		`{"token":"a b"}`:                 "one line",
		`{"token":"x","kubeconfig":"y"}`:  "not both",
		`{"password":"x"}`:                "a sign-in is",
		`{"kubeconfig":"{ not: [closed"}`: "not a kubeconfig",
		`{"kubeconfig":"apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: x, user: u}\nusers:\n- name: u\n  user: {client-certificate-data: AAAA}\n"}`: "cannot carry",
	} {
		w := do(h, http.MethodPost, SessionPath, body)
		if w.Code/100 != 4 || !strings.Contains(w.Body.String(), want) || len(w.Result().Cookies()) != 0 {
			t.Errorf("sign-in with %s: %d %s; want a refusal saying %q and no cookie", body, w.Code, w.Body, want)
		}
		if strings.Contains(w.Body.String(), "guessed") {
			t.Errorf("the refusal repeats the token: %s", w.Body)
		}
	}

	// A forged cookie is refused, and cleared.
	w := do(h, http.MethodGet, "/apis/dots.invisible.dev/v1alpha1/dots", "", &http.Cookie{Name: "dots-session", Value: newSessionID()})
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "not known here") {
		t.Errorf("a forged cookie: %d %s; want 401", w.Code, w.Body)
	}
	if cs := w.Result().Cookies(); len(cs) != 1 || cs[0].MaxAge >= 0 {
		t.Errorf("a forged cookie is not cleared: %+v", cs)
	}

	// Another site's page cannot sign someone in.
	r := httptest.NewRequest(http.MethodPost, "http://dots.example:3000"+SessionPath, strings.NewReader(`{"token":"alice-token"}`))
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusForbidden || len(rec.Result().Cookies()) != 0 {
		t.Errorf("a cross-site sign-in: %d; want 403 and no cookie", rec.Code)
	}
}

func TestSignInWithAKubeconfigTakesItsNamespace(t *testing.T) {
	h, _ := newSignInHandler(t, true)
	kubeconfig := "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: x\n  cluster: {server: 'https://127.0.0.1:8787'}\n" +
		"contexts:\n- name: c\n  context: {cluster: x, user: u, namespace: family}\nusers:\n- name: u\n  user: {token: alice-token}\n"
	body, _ := json.Marshal(signInRequest{Kubeconfig: kubeconfig})
	cookie, info := signInAs(t, h, string(body))
	if info.Person == nil || info.Person.Namespace != "family" {
		t.Errorf("signed in as %+v; want the kubeconfig's namespace family", info.Person)
	}
	// Over HTTPS the cookie is Secure and the browser keeps it for this host alone.
	if !cookie.Secure || cookie.Name != "__Host-dots-session" {
		t.Errorf("cookie over HTTPS: %+v; want Secure and __Host-", cookie)
	}
	// One who may list every namespace's Dots sees them all.
	_, owner := signInAs(t, h, `{"token":"owner-token"}`)
	if owner.Person == nil || owner.Person.Namespace != "" {
		t.Errorf("the owner signed in as %+v; want every namespace", owner.Person)
	}
}

func TestSessionEndsWithItsTokenAndWhenTheTokenIsRefused(t *testing.T) {
	h, fake := newSignInHandler(t, false)
	exp := time.Now().Add(time.Hour)
	cookie, info := signInAs(t, h, fmt.Sprintf(`{"token":%q}`, aJWT(exp)))
	if info.Expires == nil || info.Expires.Unix() != exp.Unix() {
		t.Errorf("a session of a token ending at %v ends at %v; want the token's end", exp, info.Expires)
	}
	h.signIn.now = func() time.Time { return exp.Add(time.Second) }
	w := do(h, http.MethodGet, "/apis/dots.invisible.dev/v1alpha1/dots", "", cookie)
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "has ended") {
		t.Errorf("a session past its end: %d %s; want 401", w.Code, w.Body)
	}
	h.signIn.now = time.Now

	// A token the API server stops accepting ends its session.
	cookie, _ = signInAs(t, h, `{"token":"alice-token"}`)
	fake.mu.Lock()
	fake.reject = true
	fake.mu.Unlock()
	if w := do(h, http.MethodGet, "/apis/dots.invisible.dev/v1alpha1/dots", "", cookie); w.Code != http.StatusUnauthorized {
		t.Fatalf("a revoked token: %d", w.Code)
	}
	if w := do(h, http.MethodGet, SessionPath, "", cookie); strings.Contains(w.Body.String(), "alice") {
		t.Errorf("the session of a revoked token lives on: %s", w.Body)
	}
}

func TestLiveCarriesThePersonsTokenAndNamespace(t *testing.T) {
	h, fake := newSignInHandler(t, false)
	cookie, _ := signInAs(t, h, `{"token":"alice-token"}`)
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+LivePath+"?watch=dots:5&namespace=team", nil)
	req.AddCookie(cookie)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 256)
	if _, err := res.Body.Read(buf); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("live: %d %v", res.StatusCode, err)
	}
	fake.mu.Lock()
	seen := strings.Join(fake.seen, "\n")
	fake.mu.Unlock()
	if !strings.Contains(seen, "Bearer alice-token /apis/dots.invisible.dev/v1alpha1/namespaces/team/dots?") || !strings.Contains(seen, "Bearer alice-token /dots/v1/stream") {
		t.Errorf("the live parts reached the API server as:\n%s\nwant alice's token on namespace team's watch and on the stream", seen)
	}
	if w := do(h, http.MethodGet, LivePath+"?watch=dots:5&namespace=Not_A_Name", "", cookie); w.Code != http.StatusBadRequest {
		t.Errorf("live with a bad namespace: %d; want 400", w.Code)
	}
}

func TestWithoutSignInTheSessionSaysSo(t *testing.T) {
	h := newTestHandler(t, &upstream{})
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.2:3000"+SessionPath, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"signIn":false}` {
		t.Errorf("the session without sign-in: %d %s", w.Code, w.Body)
	}
	r = httptest.NewRequest(http.MethodPost, "http://127.0.0.2:3000"+SessionPath, strings.NewReader(`{"token":"x"}`))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "--web-sign-in") {
		t.Errorf("a sign-in without sign-in on: %d %s; want 404 saying how to turn it on", w.Code, w.Body)
	}
}
