package webui

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

func TestParseListen(t *testing.T) {
	tests := map[string]struct {
		in     string
		signIn bool
		want   Listen
		// forced: sign-in is turned on by the address.
		forced  bool
		wantErr bool
	}{
		"default":             {in: "", want: Listen{Address: DefaultListen}},
		"set":                 {in: "127.0.0.3:8080", want: Listen{Address: "127.0.0.3:8080"}},
		"sign-in asked for":   {in: "127.0.0.3:8080", signIn: true, want: Listen{Address: "127.0.0.3:8080", SignIn: true}},
		"sign-in on loopback": {in: "", signIn: true, want: Listen{Address: DefaultListen, SignIn: true}},
		"asked, on a LAN":     {in: "192.168.1.20:3000", signIn: true, want: Listen{Address: "192.168.1.20:3000", SignIn: true, TLS: true}},
		// Where a guest or another machine would reach the admin's
		// credential: people sign in, over HTTPS where other machines
		// reach it.
		"guests' loopback":      {in: "127.0.0.1:3000", want: Listen{Address: "127.0.0.1:3000", SignIn: true}, forced: true},
		"guests' ipv6 loopback": {in: "[::1]:3000", want: Listen{Address: "[::1]:3000", SignIn: true}, forced: true},
		"every address":         {in: "0.0.0.0:3000", want: Listen{Address: "0.0.0.0:3000", SignIn: true, TLS: true}, forced: true},
		"a LAN address":         {in: "192.168.1.20:3000", want: Listen{Address: "192.168.1.20:3000", SignIn: true, TLS: true}, forced: true},
		"a name":                {in: "localhost:3000", wantErr: true},
		"no port":               {in: "127.0.0.2", wantErr: true},
		"port zero":             {in: "127.0.0.2:0", wantErr: true},
		"port too big":          {in: "127.0.0.2:70000", wantErr: true},
		"no host":               {in: ":3000", wantErr: true},
		"not a number":          {in: "127.0.0.2:web", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseListen(tc.in, tc.signIn)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseListen(%q, %v): %v; want error %v", tc.in, tc.signIn, err, tc.wantErr)
			}
			if (got.ForcedSignIn != "") != tc.forced {
				t.Errorf("ParseListen(%q, %v) forced sign-in: %q; want forced %v", tc.in, tc.signIn, got.ForcedSignIn, tc.forced)
			}
			got.ForcedSignIn = ""
			if got != tc.want {
				t.Errorf("ParseListen(%q, %v) = %+v; want %+v", tc.in, tc.signIn, got, tc.want)
			}
		})
	}
}

// upstream records what reached the API server.
type upstream struct {
	auth, impersonate, cookie string
	path                      string
}

func newTestHandler(t *testing.T, up *upstream) http.Handler {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.auth, up.impersonate, up.cookie, up.path = r.Header.Get("Authorization"), r.Header.Get("Impersonate-User"), r.Header.Get("Cookie"), r.URL.RequestURI()
		if r.URL.Path == "/dots/v1/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "id: 7\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, `{"kind":"DotList"}`)
	}))
	t.Cleanup(api.Close)
	h, err := NewHandler(Options{
		Upstream:     &rest.Config{Host: api.URL, BearerToken: "the-server-token"},
		Files:        fstest.MapFS{"index.html": {Data: []byte("<p>app</p>")}, "assets/a.js": {Data: []byte("1")}},
		AllowedHosts: []string{"dots.test"},
		Log:          logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestChecks(t *testing.T) {
	tests := map[string]struct {
		reason     string
		method     string
		path, host string
		header     map[string]string
		wantStatus int
		wantUp     bool
	}{
		"page":               {reason: "the app on the default address", path: "/", host: "127.0.0.2:3000", wantStatus: 200},
		"app address":        {reason: "an address of the app serves index.html", path: "/dots/default/a/chat", host: "localhost:3000", wantStatus: 200},
		"asset":              {reason: "a built file", path: "/assets/a.js", host: "127.0.0.2:3000", wantStatus: 200},
		"missing asset":      {reason: "a file that is not there is a 404, not the app", path: "/assets/b.js", host: "127.0.0.2:3000", wantStatus: 404},
		"rebound host":       {reason: "DNS rebinding: a foreign name pointed at the loopback", path: "/", host: "evil.example:3000", wantStatus: 403},
		"rebound host api":   {reason: "DNS rebinding on the API", path: "/apis", host: "evil.example:3000", wantStatus: 403},
		"allowed host":       {reason: "a name the person listed", path: "/apis", host: "dots.test:3000", wantStatus: 200, wantUp: true},
		"ipv6 loopback":      {reason: "::1 is a loopback name", path: "/api", host: "[::1]:3000", wantStatus: 200, wantUp: true},
		"same origin":        {reason: "the app's own fetch", path: "/apis/dots.invisible.dev/v1alpha1/dots", host: "127.0.0.2:3000", header: map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.2:3000"}, wantStatus: 200, wantUp: true},
		"cross site":         {reason: "a foreign page's fetch", path: "/apis", host: "127.0.0.2:3000", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, wantStatus: 403},
		"same site":          {reason: "another port of the same site is another origin", path: "/apis", host: "127.0.0.2:3000", header: map[string]string{"Sec-Fetch-Site": "same-site"}, wantStatus: 403},
		"foreign origin":     {reason: "an old browser without Sec-Fetch-Site", method: "POST", path: "/dots/v1/namespaces/default/dots/a/messages", host: "127.0.0.2:3000", header: map[string]string{"Origin": "http://evil.example"}, wantStatus: 403},
		"no browser headers": {reason: "curl on this machine", path: "/dots/v1/health", host: "127.0.0.2:3000", wantStatus: 200, wantUp: true},
		"live cross site":    {reason: "the live connection is the API's too", path: LivePath + "?watch=dots:1", host: "127.0.0.2:3000", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, wantStatus: 403},
		"live rebound host":  {reason: "DNS rebinding on the live connection", path: LivePath + "?watch=dots:1", host: "evil.example:3000", wantStatus: 403},
		"host agent route":   {reason: "the host agents' routes are not the page's", path: "/dots/v1/hostagent/hosts/h/outbox", host: "127.0.0.2:3000", wantStatus: 404},
		"post to a page":     {reason: "the files are read only", method: "POST", path: "/", host: "127.0.0.2:3000", wantStatus: 405},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var up upstream
			h := newTestHandler(t, &up)
			req := httptest.NewRequest(cmpOr(tc.method, "GET"), tc.path, nil)
			req.Host = tc.host
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus {
				t.Errorf("%s: %s %s Host %s: status %d, want %d (%s)", tc.reason, req.Method, tc.path, tc.host, rec.Code, tc.wantStatus, rec.Body)
			}
			if reached := up.path != ""; reached != tc.wantUp {
				t.Errorf("%s: reached the API %v, want %v", tc.reason, reached, tc.wantUp)
			}
		})
	}
}

func TestProxyAddsTheServersCredential(t *testing.T) {
	var up upstream
	h := newTestHandler(t, &up)
	req := httptest.NewRequest("GET", "/apis/dots.invisible.dev/v1alpha1/dots?watch=1", nil)
	req.Host = "127.0.0.2:3000"
	req.Header.Set("Authorization", "Bearer the-browsers-guess")
	req.Header.Set("Impersonate-User", "someone")
	req.Header.Set("Cookie", "a=b")
	h.ServeHTTP(httptest.NewRecorder(), req)
	got := upstream{auth: up.auth, impersonate: up.impersonate, cookie: up.cookie, path: up.path}
	want := upstream{auth: "Bearer the-server-token", path: "/apis/dots.invisible.dev/v1alpha1/dots?watch=1"}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(upstream{})); diff != "" {
		t.Errorf("what reached the API server (-want +got):\n%s", diff)
	}
}

func TestStreamIsFlushedAsItComes(t *testing.T) {
	var up upstream
	srv := httptest.NewServer(newTestHandler(t, &up))
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(srv.URL + "/dots/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The upstream holds the stream open after its first message: the
	// line arrives only if the proxy flushed it.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "id: 7" {
		t.Fatalf("first line of the stream = %q, %v; want %q", line, err, "id: 7")
	}
}

// TestDotsAPIElsewhere: against a cluster that is not ours, the Dots API is
// served by our own server, not the API server, and the proxy sends its
// paths there with the same credential.
func TestDotsAPIElsewhere(t *testing.T) {
	var api, dots upstream
	serve := func(up *upstream) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			up.auth, up.path = r.Header.Get("Authorization"), r.URL.RequestURI()
			_, _ = io.WriteString(w, `{}`)
		}))
		t.Cleanup(s.Close)
		return s
	}
	apiServer, dotsServer := serve(&api), serve(&dots)
	h, err := NewHandler(Options{
		Upstream: &rest.Config{Host: apiServer.URL, BearerToken: "the-server-token"},
		DotsAPI:  &rest.Config{Host: dotsServer.URL, BearerToken: "the-server-token"},
		Files:    fstest.MapFS{"index.html": {Data: []byte("<p>app</p>")}},
		Log:      logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/apis/dots.invisible.dev/v1alpha1/dots", "/dots/v1/health"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Host = "127.0.0.2:3000"
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if api.path != "/apis/dots.invisible.dev/v1alpha1/dots" || dots.path != "/dots/v1/health" {
		t.Errorf("the API server got %q and the Dots API %q; want each its own", api.path, dots.path)
	}
	if dots.auth != "Bearer the-server-token" {
		t.Errorf("the Dots API got the credential %q", dots.auth)
	}
}

// TestLive: the page's one connection carries the watches it names and the
// stream, with the server's credential; a malformed query is refused with
// what to send instead.
func TestLive(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Header.Get("Authorization")+" "+r.URL.RequestURI())
		mu.Unlock()
		flusher := w.(http.Flusher)
		if r.URL.Path == "/dots/v1/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "id: 7\n\nid: 8\nevent: message.user\ndata: {\"id\":\"8\"}\n\n")
			flusher.Flush()
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"6"}}}`+"\n")
		flusher.Flush()
		<-r.Context().Done()
	}))
	defer api.Close()
	h, err := NewHandler(Options{
		Upstream: &rest.Config{Host: api.URL, BearerToken: "the-server-token"},
		Files:    fstest.MapFS{"index.html": {Data: []byte("<p>app</p>")}},
		Log:      logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	bad, err := http.Get(srv.URL + LivePath + "?watch=secrets:1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(bad.Body)
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "KIND:RESOURCEVERSION") {
		t.Errorf("watch=secrets:1 answered %d %s; want 400 saying the form", bad.StatusCode, body)
	}

	// Every task of the scope, and one Dot's tasks by the label the API
	// server evaluates: two watches of one kind, told apart by the selector.
	resp, err := http.Get(srv.URL + LivePath + "?watch=dots:5&watch=tasks:3&watch=" + url.QueryEscape("tasks@dots.invisible.dev/dot=alice:4") + "&types=message.user&after=6")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	want := map[string]bool{
		"event: watch\ndata: {\"kind\":\"dots\",\"event\":{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"6\"}}}}\n\n":                                                true,
		"event: watch\ndata: {\"kind\":\"tasks\",\"event\":{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"6\"}}}}\n\n":                                               true,
		"event: watch\ndata: {\"kind\":\"tasks\",\"selector\":\"dots.invisible.dev/dot=alice\",\"event\":{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"6\"}}}}\n\n": true,
		"id: 7\n\n": true,
		"id: 8\nevent: message.user\ndata: {\"id\":\"8\"}\n\n": true,
	}
	br := bufio.NewReader(resp.Body)
	var frame strings.Builder
	for len(want) > 0 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the live answer ended with %d frames not seen: %v (%v)", len(want), want, err)
		}
		frame.WriteString(line)
		if line == "\n" {
			if f := frame.String(); f != ": live\n\n" {
				if !want[f] {
					t.Errorf("unexpected frame %q", f)
				}
				delete(want, f)
			}
			frame.Reset()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(paths)
	wantPaths := []string{
		"Bearer the-server-token /apis/dots.invisible.dev/v1alpha1/dots?allowWatchBookmarks=true&resourceVersion=5&watch=1",
		"Bearer the-server-token /apis/dots.invisible.dev/v1alpha1/tasks?allowWatchBookmarks=true&labelSelector=dots.invisible.dev%2Fdot%3Dalice&resourceVersion=4&watch=1",
		"Bearer the-server-token /apis/dots.invisible.dev/v1alpha1/tasks?allowWatchBookmarks=true&resourceVersion=3&watch=1",
		"Bearer the-server-token /dots/v1/stream?after=6&types=message.user",
	}
	if diff := cmp.Diff(wantPaths, paths); diff != "" {
		t.Errorf("what reached the API server (-want +got):\n%s", diff)
	}
}

func TestParseListenSaysWhy(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:3000": "every Dot's guest reaches this machine's 127.0.0.1 (as 10.0.2.2)",
		"0.0.0.0:3000":   "reached from other machines",
	} {
		l, err := ParseListen(in, false)
		if err != nil || !strings.Contains(l.ForcedSignIn, want) {
			t.Errorf("ParseListen(%q): %+v, %v; want sign-in turned on because %q", in, l, err, want)
		}
	}
	if _, err := ParseListen("localhost:3000", false); err == nil || !strings.Contains(err.Error(), "not a name") || !strings.Contains(err.Error(), "such as "+DefaultListen) {
		t.Errorf("ParseListen(localhost:3000): %v; want it to say an address, not a name, and which", err)
	}
}

func TestListenURLNamesTheMachineForEveryAddress(t *testing.T) {
	if got := (Listen{Address: "127.0.0.2:3000"}).URL(); got != "http://127.0.0.2:3000" {
		t.Errorf("URL of 127.0.0.2:3000 = %q", got)
	}
	got := (Listen{Address: "0.0.0.0:3443", TLS: true}).URL()
	if !strings.HasPrefix(got, "https://") || strings.Contains(got, "0.0.0.0") || !strings.HasSuffix(got, ":3443") {
		t.Errorf("URL of 0.0.0.0:3443 = %q; want https:// and the machine's name", got)
	}
}

// TestParseLiveSelector: a watch picks its objects with a label selector
// given after @, and what is not one is refused with what to send instead.
func TestParseLiveSelector(t *testing.T) {
	watches, _, _, err := parseLive(url.Values{"watch": {"tasks:3", "tasks@dots.invisible.dev/dot=alice:4", "tasks@dots.invisible.dev/dot=bob:4"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []liveWatch{{"tasks", "", "3"}, {"tasks", "dots.invisible.dev/dot=alice", "4"}, {"tasks", "dots.invisible.dev/dot=bob", "4"}}
	if diff := cmp.Diff(want, watches, cmp.AllowUnexported(liveWatch{})); diff != "" {
		t.Errorf("the watches (-want +got):\n%s", diff)
	}
	for name, c := range map[string]struct {
		watch []string
		says  string
	}{
		"empty selector":  {[]string{"tasks@:1"}, "not a label selector"},
		"blank selector":  {[]string{"tasks@ :1"}, "not a label selector"},
		"not a selector":  {[]string{"tasks@dot=a=b:1"}, "not a label selector"},
		"selector, no rv": {[]string{"tasks@dots.invisible.dev/dot=a"}, "KIND@LABELSELECTOR:RESOURCEVERSION"},
		"another kind":    {[]string{"secrets@a=b:1"}, "KIND@LABELSELECTOR:RESOURCEVERSION"},
		"the same twice":  {[]string{"tasks@dots.invisible.dev/dot=a:1", "tasks@dots.invisible.dev/dot=a:2"}, "watched twice"},
	} {
		if _, _, _, err := parseLive(url.Values{"watch": c.watch}); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: watch=%q gave %v; want an error saying %q", name, c.watch, err, c.says)
		}
	}
}
