package dotsapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/hostagent/guestproxy"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// fakeGuests stands in for HostGuests: the guests of one host, each
// answering its routes from a table, and what was asked; any other host's
// agent does not answer.
type fakeGuests struct {
	host string

	mu sync.Mutex
	// routes answers a computer's request by its path (no query).
	routes map[types.NamespacedName]map[string]fakeRoute
	// asked is every request, as "namespace/name GET /path?query".
	asked []string
	// bodies is the body of every request that had one, with its
	// Content-Type: "application/json {...}".
	bodies []string
}

// fakeRoute answers one request of a fake guest.
type fakeRoute func(q url.Values) *http.Response

func newFakeGuests(host string) *fakeGuests {
	return &fakeGuests{host: host, routes: map[types.NamespacedName]map[string]fakeRoute{}}
}

var _ Guests = (*fakeGuests)(nil)

// serve makes the guest of computer answer route: a GET of its path, or
// "METHOD /path" for another method.
func (f *fakeGuests) serve(computer types.NamespacedName, route string, fn fakeRoute) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.routes[computer] == nil {
		f.routes[computer] = map[string]fakeRoute{}
	}
	f.routes[computer][route] = fn
}

func (f *fakeGuests) Do(_ context.Context, host string, computer types.NamespacedName, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error) {
	if host != f.host {
		return nil, &HostUnreachableError{Host: host, Why: "its agent's endpoint https://192.0.2.7:10250 did not answer: connection refused"}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, computer.String()+" "+method+" "+pathAndQuery)
	if body != nil {
		data, err := io.ReadAll(body)
		if err != nil {
			return nil, err
		}
		f.bodies = append(f.bodies, header.Get("Content-Type")+" "+string(data))
	}
	routes, ok := f.routes[computer]
	if !ok {
		return nil, guestproxy.ErrNoGuest
	}
	u, err := url.Parse(pathAndQuery)
	if err != nil {
		return nil, err
	}
	key := u.Path
	if method != http.MethodGet {
		key = method + " " + u.Path
	}
	fn, ok := routes[key]
	if !ok {
		return fakeAnswer(http.StatusNotFound, `{"error":"not_found","message":"no route"}`), nil
	}
	return fn(u.Query()), nil
}

// requests returns what was asked so far and forgets it.
func (f *fakeGuests) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.asked
	f.asked = nil
	return out
}

// sent returns the bodies sent so far and forgets them.
func (f *fakeGuests) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.bodies
	f.bodies = nil
	return out
}

func fakeAnswer(status int, body string) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}

// guestRBAC is rbac with the guest routes' subresources: the editor and the
// viewer of team-a get them (and list team-a's Tasks), and only the editor writes MCP secrets,
// makes Webhooks' secrets, creates, closes and deletes browser identities, and patches
// Computers (their power).
var guestRBAC = authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	// dots-editor and dots-viewer list the namespace's Tasks.
	if a.GetNamespace() == "team-a" && a.GetAPIGroup() == dotsv1.GroupVersion.Group && a.GetResource() == "tasks" && a.GetVerb() == "list" &&
		(a.GetUser().GetName() == "eddie" || a.GetUser().GetName() == "vera") {
		return authorizer.DecisionAllow, "", nil
	}
	// dots-editor makes Webhooks' secrets (update webhooks/secret); the
	// viewer may not.
	if a.GetNamespace() == "team-a" && a.GetAPIGroup() == dotsv1.GroupVersion.Group && a.GetResource() == "webhooks" && a.GetSubresource() == webhookSecretSubresource &&
		a.GetUser().GetName() == "eddie" && a.GetVerb() == "update" {
		return authorizer.DecisionAllow, "", nil
	}
	if a.GetNamespace() == "team-a" && a.GetAPIGroup() == dotsv1.GroupVersion.Group && a.GetResource() == "computers" && a.GetSubresource() == "" &&
		a.GetUser().GetName() == "eddie" && a.GetVerb() == "patch" {
		return authorizer.DecisionAllow, "", nil
	}
	read := []string{filesSubresource, screenshotSubresource, toolsSubresource, skillsSubresource, usageSubresource, mcpSecretsSubresource, browserIdentitiesSubresource}
	if a.GetNamespace() == "team-a" && a.GetAPIGroup() == dotsv1.GroupVersion.Group && a.GetResource() == "dots" && slices.Contains(read, a.GetSubresource()) {
		who, verb := a.GetUser().GetName(), a.GetVerb()
		switch {
		case (who == "eddie" || who == "vera") && verb == "get",
			who == "eddie" && a.GetSubresource() == mcpSecretsSubresource && (verb == "update" || verb == "delete"),
			who == "eddie" && a.GetSubresource() == browserIdentitiesSubresource && (verb == "create" || verb == "update" || verb == "delete"):
			return authorizer.DecisionAllow, "", nil
		}
	}
	return rbac.Authorize(ctx, a)
})

// A guest env's Dots, in team-a: the local host is host-1.
const (
	localHost  = "host-1"
	remoteHost = "host-2"
)

var (
	// runningDot's computer runs on the local host, its guest answering.
	runningDot = types.NamespacedName{Namespace: "team-a", Name: "runner"}
	// stoppedDot's computer is stopped (asleep) on the local host.
	stoppedDot = types.NamespacedName{Namespace: "team-a", Name: "sleeper"}
	// remoteDot's computer runs on another host.
	remoteDot = types.NamespacedName{Namespace: "team-a", Name: "faraway"}
	// bootingDot's computer runs and the agent has no guest of it yet.
	bootingDot = types.NamespacedName{Namespace: "team-a", Name: "booting"}
	// unplacedDot has no computer yet.
	unplacedDot = types.NamespacedName{Namespace: "team-a", Name: "unplaced"}
	// mcpDot's config names MCP secrets; its Secret holds one of them.
	mcpDot = types.NamespacedName{Namespace: "team-a", Name: "mcp"}
)

// mcpDot's Secret and what it holds.
const (
	mcpSecretName = "mcp-own"
	mcpSetValue   = "Bearer the-stored-value"
)

// guestEnv is a Dots API whose guests are a fakeGuests of the local host.
type guestEnv struct {
	*env
	guests *fakeGuests
	// client is the fake API server's, to read what the routes wrote.
	client client.Client
	// doctorRuns counts the runs of the fake doctor.
	doctorRuns chan struct{}
	// entered counts the requests that reached the handler.
	entered atomic.Int64
}

// guestEnvOptions change a guest env.
type guestEnvOptions struct {
	// defaultKey stores the host-wide default key.
	defaultKey bool
	// doctor is the doctor the server runs; none when nil.
	doctor func(ctx context.Context) doctor.Report
	// intercept steps into the fake API server's calls (a write made by
	// someone else in between); none when its fields are nil.
	intercept interceptor.Funcs
	// log is the handler's log; discarded when unset.
	log logr.Logger
}

func newGuestEnv(t testing.TB, o guestEnvOptions) *guestEnv {
	t.Helper()
	var objs []client.Object
	computer := func(d *dotsv1.Dot, host string, state dotsv1.ComputerState) *dotsv1.Computer {
		c := &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, dotsv1.GroupVersion.WithKind("Dot"))}}}
		c.Spec.NodeName = host
		c.Status.State = state
		if state == dotsv1.ComputerStopped {
			c.Status.StopReason = dotsv1.StopIdle
		}
		return c
	}
	dot := func(key types.NamespacedName) *dotsv1.Dot {
		d := testDot(key.Namespace, key.Name, "", false)[0].(*dotsv1.Dot)
		objs = append(objs, d)
		return d
	}
	for _, c := range []struct {
		key   types.NamespacedName
		host  string
		state dotsv1.ComputerState
	}{
		{runningDot, localHost, dotsv1.ComputerRunning},
		{stoppedDot, localHost, dotsv1.ComputerStopped},
		{remoteDot, remoteHost, dotsv1.ComputerRunning},
		{bootingDot, localHost, dotsv1.ComputerRunning},
	} {
		objs = append(objs, computer(dot(c.key), c.host, c.state))
	}
	dot(unplacedDot)
	m := dot(mcpDot)
	m.Spec.SecretRef = &dotsv1.SecretReference{Name: mcpSecretName}
	m.Spec.MCPServers = []dotsv1.MCPServer{
		{Name: "time", Command: "time-mcp", Secrets: []string{"TIME_API_KEY", "TIME_REGION"}},
		{Name: "search", URL: "https://search.example/mcp", Secrets: []string{"Authorization"}},
	}
	objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mcpDot.Namespace, Name: mcpSecretName},
		Data: map[string][]byte{dotsv1.OpenRouterKeySecretKey: []byte("sk-or-own"), dotsv1.MCPSecretKey("time", "TIME_API_KEY"): []byte(mcpSetValue)}})
	if o.defaultKey {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName},
			Data: map[string][]byte{dotsv1.OpenRouterKeySecretKey: []byte("sk-or-default")}})
	}

	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).WithInterceptorFuncs(o.intercept).Build()
	e := &guestEnv{
		env:        &env{dots: map[string]store.Dot{}, clock: clocktesting.NewFakePassiveClock(time.Now())},
		guests:     newFakeGuests(localHost),
		client:     c,
		doctorRuns: make(chan struct{}, 100),
	}
	for _, o := range objs {
		if d, ok := o.(*dotsv1.Dot); ok {
			e.dots[d.Namespace+"/"+d.Name] = storeDot(d)
		}
	}
	// The running Dot's guest answers; the booting one's does not yet.
	e.guests.serve(runningDot, "/", func(url.Values) *http.Response { return fakeAnswer(http.StatusOK, "") })
	opts := Options{
		Store:      testStore,
		Reader:     c,
		Client:     c,
		Authorizer: guestRBAC,
		Guests:     e.guests,
		Server:     ServerInfo{DatabaseKind: wire.DatabaseManaged, Home: "/srv/dots", LogsDir: "/srv/dots/logs"},
		Log:        o.log,
	}
	if o.doctor != nil {
		opts.Doctor = func(ctx context.Context) doctor.Report {
			e.doctorRuns <- struct{}{}
			return o.doctor(ctx)
		}
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.entered.Add(1)
		if u, ok := users[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]; ok {
			r = r.WithContext(request.WithUser(r.Context(), u))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// get sends GET path?query as who.
func (e *guestEnv) get(t *testing.T, who, path string, query url.Values) (answer, *http.Response, []byte) {
	t.Helper()
	return e.send(t, http.MethodGet, who, path, query, "")
}

// send sends method path?query as who, with body as JSON when not "".
func (e *guestEnv) send(t *testing.T, method, who, path string, query url.Values, body string) (answer, *http.Response, []byte) {
	t.Helper()
	u := e.srv.URL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+who)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{Status: resp.StatusCode}
	if resp.StatusCode >= 400 {
		a = errorAnswer(t, resp.StatusCode, data)
	}
	return a, resp, data
}

func errorAnswer(t *testing.T, status int, data []byte) answer {
	t.Helper()
	var we wire.Error
	if err := json.Unmarshal(data, &we); err != nil {
		t.Fatalf("error answer %q is not JSON: %v", data, err)
	}
	return answer{Status: status, Code: we.Code, Message: we.Message}
}

// The refusals every guest route shares: who may ask, and where the Dot's
// computer is.
func commonGuestRefusals(path func(ns, name string) string, query url.Values) []guestCase {
	p := func(k types.NamespacedName) string { return path(k.Namespace, k.Name) }
	cases := []guestCase{
		{reason: "someone without a role may not read it", who: "nobody", path: p(runningDot),
			want: answer{http.StatusForbidden, wire.CodeForbidden, `user "nora" may not get dots/`}},
		{reason: "the editor of team-a reads nothing of team-b", who: "editor", path: path("team-b", "runner"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, "may not get"}},
		{reason: "a Dot that does not exist", who: "viewer", path: path("team-a", "ghost"),
			want: answer{http.StatusNotFound, wire.CodeNotFound, "no Dot ghost"}},
		{reason: "a stopped computer has no guest to read", who: "viewer", path: p(stoppedDot),
			want: answer{http.StatusConflict, wire.CodeComputerStopped, "is not running (its state is STOPPED), stopped for idle"}},
		{reason: "a Dot with no computer yet", who: "viewer", path: p(unplacedDot),
			want: answer{http.StatusConflict, wire.CodeComputerStopped, "has no computer yet"}},
		{reason: "a computer on a host whose agent does not answer", who: "viewer", path: p(remoteDot),
			want: answer{http.StatusBadGateway, wire.CodeHostUnreachable, "runs on host host-2, whose agent cannot be reached: its agent's endpoint https://192.0.2.7:10250 did not answer: connection refused"}},
		{reason: "a running computer whose guest the agent cannot reach yet", who: "viewer", path: p(bootingDot),
			want: answer{http.StatusServiceUnavailable, wire.CodeGuestUnavailable, "cannot be reached yet"}},
	}
	for i := range cases {
		cases[i].query = query
	}
	return cases
}

// guestCase is one request to a guest route and its answer.
type guestCase struct {
	reason string
	// method is GET when "".
	method string
	who    string
	path   string
	query  url.Values
	// body is sent as JSON when not "".
	body string
	want answer
	// asks is what the guest must be asked, "" for nothing.
	asks string
	// check looks at a success.
	check func(t *testing.T, resp *http.Response, body []byte)
}

func (e *guestEnv) run(t *testing.T, cases []guestCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			e.guests.requests()
			method := cmp.Or(tc.method, http.MethodGet)
			got, resp, body := e.send(t, method, tc.who, tc.path, tc.query, tc.body)
			if !got.matches(tc.want) {
				t.Fatalf("%s %s?%s as %s:\ngot  %+v\nwant %+v", method, tc.path, tc.query.Encode(), tc.who, got, tc.want)
			}
			asked := e.guests.requests()
			switch {
			case tc.asks == "" && len(asked) > 0 && tc.want.Code != wire.CodeGuestUnavailable:
				t.Errorf("the guest was asked %q; want nothing asked", asked)
			case tc.asks != "" && (len(asked) != 1 || asked[0] != tc.asks):
				t.Errorf("the guest was asked %q; want %q", asked, tc.asks)
			}
			if got.Status < 300 && tc.check != nil {
				tc.check(t, resp, body)
			}
		})
	}
}

func asked(k types.NamespacedName, pathAndQuery string) string {
	return askedBy(k, http.MethodGet, pathAndQuery)
}

func askedBy(k types.NamespacedName, method, pathAndQuery string) string {
	return fmt.Sprintf("%s %s %s", k, method, pathAndQuery)
}

// jsonUnmarshalStrict decodes one JSON value with no unknown field.
func jsonUnmarshalStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func jsonEncode(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }
