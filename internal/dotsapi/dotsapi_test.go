package dotsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
	"github.com/invisible-dots/invisible-dots/internal/postgres"
	"github.com/invisible-dots/invisible-dots/internal/postgres/pgtest"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// One managed PostgreSQL for the package; each test makes Dots of its own
// UIDs, so tests keep apart.
var testStore *store.Store

func TestMain(m *testing.M) {
	os.Exit(pgtest.Run(m, func(db *postgres.Instance) { testStore = store.New(db.Pool()) }))
}

// The people and agents of the tests, by the bearer token the test server
// maps to them (standing in for the API server's authentication filter).
var users = map[string]user.Info{
	"editor":  &user.DefaultInfo{Name: "eddie", Groups: []string{user.AllAuthenticated}},
	"viewer":  &user.DefaultInfo{Name: "vera", Groups: []string{user.AllAuthenticated}},
	"nobody":  &user.DefaultInfo{Name: "nora", Groups: []string{user.AllAuthenticated}},
	"admin":   &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
	"agent-1": &user.DefaultInfo{Name: serviceaccount.MakeUsername(dotsv1.SystemNamespace, hostidentity.ServiceAccount("host-1"))},
	"agent-2": &user.DefaultInfo{Name: serviceaccount.MakeUsername(dotsv1.SystemNamespace, hostidentity.ServiceAccount("host-2"))},
	// A ServiceAccount of another namespace named like a host agent is not one.
	"impostor": &user.DefaultInfo{Name: serviceaccount.MakeUsername("team-a", hostidentity.ServiceAccount("host-1"))},
}

// rbac stands in for the API server's authorizer: the editor has
// dots/messages create and get in team-a, the viewer get there, both
// dots/events get there, the admin is
// in system:masters; nobody else has anything.
var rbac = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	for _, g := range a.GetUser().GetGroups() {
		if g == user.SystemPrivilegedGroup {
			return authorizer.DecisionAllow, "", nil
		}
	}
	if a.GetNamespace() != "team-a" || a.GetAPIGroup() != dotsv1.GroupVersion.Group || a.GetResource() != "dots" {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if a.GetSubresource() == "events" && a.GetVerb() == "get" && (a.GetUser().GetName() == "eddie" || a.GetUser().GetName() == "vera") {
		return authorizer.DecisionAllow, "", nil
	}
	if a.GetSubresource() != "messages" {
		return authorizer.DecisionNoOpinion, "", nil
	}
	switch {
	case a.GetUser().GetName() == "eddie" && (a.GetVerb() == "create" || a.GetVerb() == "get"),
		a.GetUser().GetName() == "vera" && a.GetVerb() == "get":
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
})

var uidCount atomic.Int64

// testDot is a Dot and, when host is not empty, its Computer on host.
func testDot(ns, name, host string, deleting bool) []client.Object {
	uid := types.UID(fmt.Sprintf("uid-%d-%d", time.Now().UnixNano(), uidCount.Add(1)))
	d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}}
	if deleting {
		d.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		d.Finalizers = []string{dotsv1.DotFinalizer}
	}
	objs := []client.Object{d}
	if host != "" {
		c := &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, dotsv1.GroupVersion.WithKind("Dot"))}}}
		c.Spec.NodeName = host
		objs = append(objs, c)
	}
	return objs
}

// env is a Dots API on a test server, over the package's database and a fake
// API server holding the Dots. The handler behind the server can be made
// again (stop, then start), as a control plane restarted on the same
// database.
type env struct {
	srv   *httptest.Server
	dots  map[string]store.Dot
	clock *clocktesting.FakePassiveClock
	// feed is the current handler's feed of the live streams.
	feed *Feed

	objs    []client.Object
	opts    []envOption
	current atomic.Pointer[http.Handler]
	// stop stops the current handler's outbox notifications and feed,
	// which ends its streams.
	stop func()
}

// envOption changes the Options of the env's handler and of its feed.
type envOption func(*Options, *FeedOptions)

// newEnv starts the env.
func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	var objs []client.Object
	add := func(o ...client.Object) { objs = append(objs, o...) }
	add(testDot("team-a", "helper", "host-1", false)...)
	add(testDot("team-b", "helper", "host-1", false)...)
	add(testDot("team-a", "far", "host-2", false)...)
	add(testDot("team-a", "unplaced", "", false)...)
	add(testDot("team-a", "leaving", "host-1", true)...)
	// A Computer of the Dot's name on host-1 that another Dot controls.
	stray := testDot("team-a", "stray", "", false)
	other := testDot("team-a", "other", "", false)[0]
	strayComputer := &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "stray",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(other, dotsv1.GroupVersion.WithKind("Dot"))}}}
	strayComputer.Spec.NodeName = "host-1"
	add(stray[0], strayComputer)

	e := &env{dots: map[string]store.Dot{}, clock: clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Microsecond)),
		objs: objs, opts: opts}
	for _, o := range objs {
		if d, ok := o.(*dotsv1.Dot); ok {
			e.dots[d.Namespace+"/"+d.Name] = storeDot(d)
		}
	}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := users[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]; ok {
			r = r.WithContext(request.WithUser(r.Context(), u))
		}
		(*e.current.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	e.start(t)
	// Before the server's Close, which waits for the open streams.
	t.Cleanup(func() { e.stop() })
	return e
}

// start makes the handler, with its outbox notifications and its feed
// running, and serves it.
func (e *env) start(t testing.TB) {
	t.Helper()
	changes := testStore.NewChanges(store.OutboxChannel, 100, logr.Discard())
	o := Options{
		Store:      testStore,
		Changes:    changes,
		Reader:     fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(e.objs...).Build(),
		Authorizer: rbac,
		Clock:      e.clock,
	}
	fo := FeedOptions{Store: testStore}
	for _, opt := range e.opts {
		opt(&o, &fo)
	}
	feed := NewFeed(fo)
	o.Feed = feed
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Add(2)
	go func() {
		defer running.Done()
		_ = changes.Run(ctx)
	}()
	go func() {
		defer running.Done()
		_ = feed.Run(ctx)
	}()
	e.stop = func() { cancel(); running.Wait() }
	for deadline := time.Now().Add(10 * time.Second); !changes.Listening(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the outbox's notifications were not heard within 10 s")
		}
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	var served http.Handler = h
	e.feed = feed
	e.current.Store(&served)
}

// restConfig is the rest.Config of who, for the Go client.
func (e *env) restConfig(who string) *rest.Config {
	return &rest.Config{Host: e.srv.URL, BearerToken: who}
}

// answer is what a test compares of a response.
type answer struct {
	Status int
	Code   string
	// Message holds a fragment the error's text must contain.
	Message string
}

// call sends a raw request as who and returns the answer and its body.
func (e *env) call(t *testing.T, who, method, path, contentType, body string) (answer, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+who)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
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
		var we wire.Error
		if err := json.Unmarshal(data, &we); err != nil {
			t.Fatalf("%s %s: error answer %q is not JSON: %v", method, path, data, err)
		}
		a.Code, a.Message = we.Code, we.Message
		checkIsAStatus(t, resp.StatusCode, we, data)
	}
	return a, data
}

// statusDecoder reads a Kubernetes Status as client-go does.
var statusDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}()

// checkIsAStatus: every error answer is also a Kubernetes Status carrying
// the same message, so kubectl get --raw shows it.
func checkIsAStatus(t *testing.T, httpStatus int, we wire.Error, data []byte) {
	t.Helper()
	obj, _, err := statusDecoder.Decode(data, nil, nil)
	st, ok := obj.(*metav1.Status)
	if err != nil || !ok {
		t.Fatalf("error answer %q is not a Kubernetes Status: %v", data, err)
	}
	if st.Status != metav1.StatusFailure || int(st.Code) != httpStatus || st.Message != we.Message || st.Reason == "" {
		t.Errorf("error answer %q as a Status: %+v; want Failure, code %d, a reason and the message", data, st, httpStatus)
	}
}

// matches compares an answer with the wanted one, Message as a fragment.
func (a answer) matches(want answer) bool {
	return a.Status == want.Status && a.Code == want.Code && strings.Contains(a.Message, want.Message)
}
