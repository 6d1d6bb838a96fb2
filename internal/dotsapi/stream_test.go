package dotsapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// appendEvents stores n host events of the Dot, of type typ, each in its
// own transaction, with data {"n": i, "pad": pad}.
func appendEvents(t testing.TB, dot store.Dot, typ string, n int, pad string) []store.Event {
	t.Helper()
	var out []store.Event
	for i := range n {
		data, _ := json.Marshal(map[string]any{"n": i, "pad": pad})
		stored, err := testStore.AppendEvents(context.Background(), store.Event{Dot: dot, Type: typ, Source: store.SourceHost, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stored...)
	}
	return out
}

func ids[E any](events []E, id func(E) int64) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = id(e)
	}
	return out
}

func storedIDs(events []store.Event) []int64 {
	return ids(events, func(e store.Event) int64 { return e.ID })
}

func streamedIDs(events []wire.StreamEvent) []int64 {
	return ids(events, func(e wire.StreamEvent) int64 { return e.ID })
}

// lastID is the log's last id now.
func lastID(t testing.TB) int64 {
	t.Helper()
	id, err := testStore.LastEventID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// follow streams as who and keeps the events keep takes (nil: all).
type follow struct {
	mu     sync.Mutex
	got    []wire.StreamEvent
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *env) follow(t testing.TB, who string, o client.StreamOptions, keep func(wire.StreamEvent) bool) *follow {
	t.Helper()
	c, err := client.New(e.restConfig(who))
	if err != nil {
		t.Fatal(err)
	}
	if o.Retry == 0 {
		o.Retry = 20 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &follow{cancel: cancel, done: make(chan struct{})}
	events, errs := c.Stream(ctx, o)
	go func() {
		defer close(f.done)
		for ev := range events {
			if keep == nil || keep(ev) {
				f.mu.Lock()
				f.got = append(f.got, ev)
				f.mu.Unlock()
			}
		}
		f.mu.Lock()
		f.err = <-errs
		f.mu.Unlock()
	}()
	t.Cleanup(func() { cancel(); <-f.done })
	return f
}

// wait waits until n events came, and returns them.
func (f *follow) wait(t testing.TB, n int) []wire.StreamEvent {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		f.mu.Lock()
		got, err := slices.Clone(f.got), f.err
		f.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-f.done:
			t.Fatalf("the stream ended after %d of %d events: %v", len(got), n, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d events in 20 s: %v", len(got), n, streamedIDs(got))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ended waits for the stream to end and returns its error.
func (f *follow) ended(t testing.TB) error {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end within 20 s")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func ofDots(dots ...store.Dot) func(wire.StreamEvent) bool {
	return func(e wire.StreamEvent) bool {
		return slices.ContainsFunc(dots, func(d store.Dot) bool { return d.UID == e.DotUID })
	}
}

func TestStreamOfADotReplaysThenGoesLive(t *testing.T) {
	e := newEnv(t)
	dot, far := e.dots["team-a/helper"], e.dots["team-a/far"]
	before := appendEvents(t, dot, wire.EventMessageUser, 3, "")
	appendEvents(t, far, wire.EventMessageUser, 2, "")

	f := e.follow(t, "viewer", client.StreamOptions{Namespace: "team-a", Dot: "helper", After: ptr.To(int64(0))}, nil)
	got := f.wait(t, 3)
	if want := storedIDs(before); !slices.Equal(streamedIDs(got), want) {
		t.Fatalf("replay = %v; want the Dot's log %v", streamedIDs(got), want)
	}
	first := got[0]
	if first.Namespace != "team-a" || first.Dot != "helper" || first.DotUID != dot.UID || first.Type != wire.EventMessageUser ||
		first.Source != string(store.SourceHost) || string(first.Data) != `{"n":0,"pad":""}` {
		t.Errorf("first event = %+v (data %s)", first, first.Data)
	}

	live := appendEvents(t, dot, protocol.EventAgentState, 2, "")
	appendEvents(t, far, wire.EventMessageUser, 1, "")
	live = append(live, appendEvents(t, dot, wire.EventMessageUser, 1, "")...)
	got = f.wait(t, 6)
	if want := append(storedIDs(before), storedIDs(live)...); !slices.Equal(streamedIDs(got), want) {
		t.Errorf("replay then live = %v; want %v, each once, in order", streamedIDs(got), want)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(f.wait(t, 6)); n != 6 {
		t.Errorf("got %d events; want 6", n)
	}

	// The types asked for, in the replay and live.
	typed := e.follow(t, "viewer", client.StreamOptions{Namespace: "team-a", Dot: "helper", After: ptr.To(int64(0)),
		Types: []string{protocol.EventAgentState}}, nil)
	more := appendEvents(t, dot, protocol.EventAgentState, 1, "")
	appendEvents(t, dot, wire.EventMessageUser, 1, "")
	got = typed.wait(t, 3)
	if want := append(storedIDs(live[:2]), storedIDs(more)...); !slices.Equal(streamedIDs(got), want) {
		t.Errorf("agent.state only = %v; want %v", streamedIDs(got), want)
	}
}

// sse is a raw reading of a stream: its messages as the wire has them.
type sse struct {
	resp *http.Response
	br   *bufio.Reader
}

type sseMessage struct {
	id, event, data string
	hasID           bool
	comments        []string
}

func (e *env) openSSE(t testing.TB, who, path, lastEventID string) *sse {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+who)
	if lastEventID != "" {
		req.Header.Set(wire.LastEventIDHeader, lastEventID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := http.DefaultTransport.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != wire.StreamContentType {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %d %s: %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return &sse{resp: resp, br: bufio.NewReader(resp.Body)}
}

// next reads the next message (comments included) within 10 s.
func (s *sse) next(t testing.TB) sseMessage {
	t.Helper()
	type result struct {
		m   sseMessage
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var m sseMessage
		for {
			line, err := s.br.ReadString('\n')
			if err != nil {
				ch <- result{m, err}
				return
			}
			line = strings.TrimSuffix(line, "\n")
			if line == "" {
				ch <- result{m, nil}
				return
			}
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "":
				m.comments = append(m.comments, value)
			case "id":
				m.id, m.hasID = value, true
			case "event":
				m.event = value
			case "data":
				m.data += value
			default:
				ch <- result{m, fmt.Errorf("unknown field in %q", line)}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("read the stream: %v", r.err)
		}
		return r.m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10 s")
	}
	return sseMessage{}
}

// nextEvent skips keep-alives and ids alone, and returns the next event.
func (s *sse) nextEvent(t testing.TB) (sseMessage, wire.StreamEvent) {
	t.Helper()
	for {
		m := s.next(t)
		if m.data == "" {
			continue
		}
		var ev wire.StreamEvent
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			t.Fatalf("data %q: %v", m.data, err)
		}
		return m, ev
	}
}

func TestStreamWireFormat(t *testing.T) {
	e := newEnv(t, func(o *Options, _ *FeedOptions) { o.StreamKeepAlive = 50 * time.Millisecond })
	dot := e.dots["team-a/helper"]
	stored := appendEvents(t, dot, wire.EventMessageUser, 3, "")

	// Last-Event-ID wins over ?after=, as an EventSource reconnects.
	s := e.openSSE(t, "viewer", wire.DotStreamPath("team-a", "helper")+"?after=0", strconv.FormatInt(stored[0].ID, 10))
	m, ev := s.nextEvent(t)
	if m.id != strconv.FormatInt(stored[1].ID, 10) || m.event != wire.EventMessageUser || ev.ID != stored[1].ID ||
		ev.Namespace != "team-a" || ev.Dot != "helper" || ev.DotUID != dot.UID {
		t.Errorf("first message = %+v, %+v; want event %d", m, ev, stored[1].ID)
	}
	if _, ev = s.nextEvent(t); ev.ID != stored[2].ID {
		t.Errorf("second event = %d; want %d", ev.ID, stored[2].ID)
	}
	for m = s.next(t); len(m.comments) == 0; m = s.next(t) {
	}
	if !slices.Equal(m.comments, []string{"keep-alive"}) || m.hasID || m.data != "" {
		t.Errorf("an idle stream sent %+v; want the keep-alive comment", m)
	}

	// Without a resume point the stream begins at the end of the log, and
	// says where with an id alone.
	end := lastID(t)
	for deadline := time.Now().Add(10 * time.Second); ; {
		s = e.openSSE(t, "viewer", wire.DotStreamPath("team-a", "helper"), "")
		m = s.next(t)
		n, err := strconv.ParseInt(m.id, 10, 64)
		if !m.hasID || err != nil || m.data != "" || m.event != "" {
			t.Fatalf("the stream began with %+v; want an id alone", m)
		}
		if n >= end {
			break
		}
		// The end is the feed's: on a busy machine it may not yet have
		// heard of the events just appended (it would send them live).
		if time.Now().After(deadline) {
			t.Fatalf("the stream began with %+v; want an id alone, at least %d", m, end)
		}
		time.Sleep(20 * time.Millisecond)
	}
	live := appendEvents(t, dot, protocol.EventAgentState, 1, "")
	if m, ev = s.nextEvent(t); ev.ID != live[0].ID || m.event != protocol.EventAgentState {
		t.Errorf("live event = %+v %+v; want %d", m, ev, live[0].ID)
	}

	// Events the stream leaves out still move its resume point on.
	s = e.openSSE(t, "viewer", wire.DotStreamPath("team-a", "helper")+"?types="+protocol.EventAgentState, "")
	s.next(t)
	skipped := appendEvents(t, dot, wire.EventMessageUser, 2, "")
	want := strconv.FormatInt(skipped[1].ID, 10)
	for deadline := time.Now().Add(10 * time.Second); ; {
		m := s.next(t)
		if m.data != "" {
			t.Fatalf("a left-out event was sent: %+v", m)
		}
		if m.id == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resume point did not move to %s", want)
		}
	}
}

func TestStreamOfEveryDotKeepsToTheNamespacesTheCallerMayRead(t *testing.T) {
	e := newEnv(t, func(o *Options, _ *FeedOptions) { o.StreamKeepAlive = 50 * time.Millisecond })
	a, b := e.dots["team-a/helper"], e.dots["team-b/helper"]
	mine := ofDots(a, b)
	start := lastID(t)
	early := appendEvents(t, a, wire.EventMessageUser, 1, "")
	early = append(early, appendEvents(t, b, wire.EventMessageUser, 1, "")...)

	viewer := e.follow(t, "viewer", client.StreamOptions{After: ptr.To(start)}, mine)
	admin := e.follow(t, "admin", client.StreamOptions{After: ptr.To(start)}, mine)
	nobody := e.openSSE(t, "nobody", wire.StreamPath+"?after="+strconv.FormatInt(start, 10), "")
	late := appendEvents(t, b, wire.EventMessageUser, 1, "")
	late = append(late, appendEvents(t, a, wire.EventMessageUser, 1, "")...)

	all := append(storedIDs(early), storedIDs(late)...)
	if got := streamedIDs(admin.wait(t, 4)); !slices.Equal(got, all) {
		t.Errorf("the admin got %v; want %v", got, all)
	}
	onlyA := []int64{early[0].ID, late[1].ID}
	if got := viewer.wait(t, 2); !slices.Equal(streamedIDs(got), onlyA) {
		t.Errorf("the viewer of team-a got %v; want %v", streamedIDs(got), onlyA)
	}
	// The viewer may not see team-b: nothing of it came. The last event is
	// team-a's, so any team-b event would have come before it.
	for _, ev := range viewer.wait(t, 2) {
		if ev.Namespace != "team-a" {
			t.Errorf("the viewer got %+v of %s", ev, ev.Namespace)
		}
	}
	// Someone with no role gets no event, and its resume point moves past
	// them all.
	for {
		m := nobody.next(t)
		if m.data != "" {
			var ev wire.StreamEvent
			_ = json.Unmarshal([]byte(m.data), &ev)
			if mine(ev) {
				t.Fatalf("someone without a role got %s", m.data)
			}
		}
		if n, _ := strconv.ParseInt(m.id, 10, 64); n >= late[1].ID {
			break
		}
	}
}

func TestStreamEndsOrFiltersWhenAccessIsRevoked(t *testing.T) {
	var revoked atomic.Bool
	authz := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if revoked.Load() && a.GetUser().GetName() == "vera" {
			return authorizer.DecisionNoOpinion, "revoked", nil
		}
		return rbac.Authorize(ctx, a)
	})
	e := newEnv(t, func(o *Options, _ *FeedOptions) {
		o.Authorizer = authz
		o.StreamKeepAlive = 50 * time.Millisecond
	})
	a := e.dots["team-a/helper"]
	start := lastID(t)
	dotStream := e.follow(t, "viewer", client.StreamOptions{Namespace: "team-a", Dot: "helper", After: ptr.To(start)}, nil)
	everyDot := e.openSSE(t, "viewer", wire.StreamPath+"?after="+strconv.FormatInt(start, 10), "")
	first := appendEvents(t, a, wire.EventMessageUser, 1, "")
	dotStream.wait(t, 1)
	if _, ev := everyDot.nextEvent(t); ev.ID != first[0].ID {
		t.Fatalf("the stream of every Dot sent %d; want %d", ev.ID, first[0].ID)
	}

	revoked.Store(true)
	e.clock.SetTime(e.clock.Now().Add(defaultStreamAccessTTL + time.Second))
	after := appendEvents(t, a, wire.EventMessageUser, 1, "")
	err := dotStream.ended(t)
	if client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("the Dot's stream ended with %v; want it ended, and a 403 when it connected again", err)
	}
	if got := streamedIDs(dotStream.wait(t, 1)); !slices.Equal(got, storedIDs(first)) {
		t.Errorf("the Dot's stream got %v; want %v alone", got, storedIDs(first))
	}
	for {
		m := everyDot.next(t)
		if m.data != "" {
			t.Fatalf("the stream of every Dot sent %s after access was revoked", m.data)
		}
		if n, _ := strconv.ParseInt(m.id, 10, 64); n >= after[0].ID {
			break
		}
	}
}

func TestStreamCutsOffASlowClientWhileOthersKeepUp(t *testing.T) {
	const buffer = 1 << 20
	e := newEnv(t, func(_ *Options, fo *FeedOptions) { fo.BufferBytes = buffer })
	dot := e.dots["team-a/helper"]
	start := lastID(t)
	fast := make([]*follow, 3)
	for i := range fast {
		fast[i] = e.follow(t, "viewer", client.StreamOptions{Namespace: "team-a", Dot: "helper", After: ptr.To(start)}, nil)
	}
	// The slow client reads the answer's head and nothing more.
	slow := e.openSSE(t, "viewer", wire.DotStreamPath("team-a", "helper")+"?after="+strconv.FormatInt(start, 10), "")
	for deadline := time.Now().Add(10 * time.Second); e.feed.subscribers() < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams subscribed; want 4", e.feed.subscribers())
		}
	}

	// 16 MiB of events: more than the sockets' buffers and the queue hold.
	pad := strings.Repeat("x", 32<<10)
	const n = 512
	stored := appendEvents(t, dot, wire.EventMessageUser, n, pad)
	want := storedIDs(stored)
	for i, f := range fast {
		if got := streamedIDs(f.wait(t, n)); !slices.Equal(got, want) {
			t.Errorf("fast client %d got %d events, not each once in order", i, len(got))
		}
	}
	if got := e.feed.subscribers(); got != 3 {
		t.Errorf("%d streams subscribed; want the 3 fast ones, the slow one cut off", got)
	}

	// The slow client finds its stream ended, and resumes where it was.
	var last int64
	for {
		line, err := slow.br.ReadString('\n')
		if err != nil {
			break
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "id: "); ok {
			// Only a whole message counts: the next blank line ends it.
			if rest, err := slow.br.ReadString('\n'); err == nil && strings.HasPrefix(rest, "event:") {
				if data, err := slow.br.ReadString('\n'); err == nil {
					if blank, err := slow.br.ReadString('\n'); err == nil && blank == "\n" && strings.HasPrefix(data, "data: ") {
						last, _ = strconv.ParseInt(v, 10, 64)
					}
				}
			}
		}
	}
	if last >= stored[n-1].ID {
		t.Fatalf("the slow client got every event (last %d); want it cut off before the end", last)
	}
	resumed := e.follow(t, "viewer", client.StreamOptions{Namespace: "team-a", Dot: "helper", After: ptr.To(last)}, nil)
	rest := want[slices.Index(want, last)+1:]
	if last < want[0] {
		rest = want
	}
	if got := streamedIDs(resumed.wait(t, len(rest))); !slices.Equal(got, rest) {
		t.Errorf("the slow client resumed with %d events; want the %d after %d", len(got), len(rest), last)
	}
}

func TestStreamClientsResumeAcrossARestart(t *testing.T) {
	e := newEnv(t)
	dot := e.dots["team-a/helper"]
	start := lastID(t)
	var clients []*follow
	for range 10 {
		clients = append(clients, e.follow(t, "viewer", client.StreamOptions{Namespace: "team-a", Dot: "helper", After: ptr.To(start)}, nil))
	}
	// And one of every Dot, from the end of the log.
	for deadline := time.Now().Add(10 * time.Second); e.feed.subscribers() < 10; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams subscribed; want 10", e.feed.subscribers())
		}
	}
	fromEnd := e.follow(t, "admin", client.StreamOptions{}, ofDots(dot))
	for deadline := time.Now().Add(10 * time.Second); e.feed.subscribers() < 11; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams subscribed; want 11", e.feed.subscribers())
		}
	}

	stored := appendEvents(t, dot, wire.EventMessageUser, 50, "")
	for _, c := range clients {
		c.wait(t, 50)
	}
	// Events written while the control plane is down, then after.
	e.stop()
	stored = append(stored, appendEvents(t, dot, wire.EventMessageUser, 50, "")...)
	e.start(t)
	stored = append(stored, appendEvents(t, dot, wire.EventMessageUser, 50, "")...)
	want := storedIDs(stored)
	for i, c := range append(clients, fromEnd) {
		if got := streamedIDs(c.wait(t, len(want))); !slices.Equal(got, want) {
			t.Errorf("client %d got %d events, not each of the %d once in order", i, len(got), len(want))
		}
	}
	time.Sleep(100 * time.Millisecond)
	for i, c := range clients {
		if got := len(c.wait(t, len(want))); got != len(want) {
			t.Errorf("client %d got %d events; want %d", i, got, len(want))
		}
	}
}

func TestStreamRefusals(t *testing.T) {
	e := newEnv(t)
	dotPath := wire.DotStreamPath("team-a", "helper")
	for _, tc := range []struct {
		name, who, method, path string
		want                    answer
	}{
		{"no right to the Dot's events", "nobody", http.MethodGet, dotPath, answer{Status: 403, Code: wire.CodeForbidden}},
		{"another namespace", "viewer", http.MethodGet, wire.DotStreamPath("team-b", "helper"), answer{Status: 403, Code: wire.CodeForbidden}},
		{"no such Dot", "viewer", http.MethodGet, wire.DotStreamPath("team-a", "nothere"), answer{Status: 404, Code: wire.CodeNotFound}},
		{"after not an id", "viewer", http.MethodGet, dotPath + "?after=x", answer{Status: 400, Code: wire.CodeInvalidRequest, Message: "not an event id"}},
		{"unknown type", "viewer", http.MethodGet, wire.StreamPath + "?types=nope", answer{Status: 400, Code: wire.CodeInvalidRequest, Message: "not an event type"}},
		{"unknown parameter", "viewer", http.MethodGet, wire.StreamPath + "?limit=5", answer{Status: 400, Code: wire.CodeInvalidRequest, Message: "unknown query parameter"}},
		{"post", "viewer", http.MethodPost, wire.StreamPath, answer{Status: 405, Code: wire.CodeMethodNotAllowed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := e.call(t, tc.who, tc.method, tc.path, "", ""); !got.matches(tc.want) {
				t.Errorf("%s %s = %+v; want %+v", tc.method, tc.path, got, tc.want)
			}
		})
	}

	t.Run("Last-Event-ID not an id", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodGet, wire.StreamPath, nil)
		req.Header.Set(wire.LastEventIDHeader, "abc")
		if _, err := parseStreamQuery(req); err == nil || !strings.Contains(err.Error(), "not an event id") {
			t.Errorf("parseStreamQuery = %v; want the header refused", err)
		}
	})

	t.Run("a server that does not follow the log", func(t *testing.T) {
		h, err := New(Options{Store: testStore, Reader: fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), Authorizer: rbac, Log: logr.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, wire.StreamPath, nil)
		req = req.WithContext(request.WithUser(req.Context(), users["admin"]))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotImplemented || !strings.Contains(rec.Body.String(), wire.CodeNotImplemented) {
			t.Errorf("GET %s = %d %s; want 501", wire.StreamPath, rec.Code, rec.Body)
		}
	})

	t.Run("a server that stops", func(t *testing.T) {
		e := newEnv(t)
		e.stop()
		if got, _ := e.call(t, "viewer", http.MethodGet, wire.StreamPath, "", ""); !got.matches(answer{Status: 503, Code: wire.CodeUnavailable}) {
			t.Errorf("GET %s = %+v; want 503", wire.StreamPath, got)
		}
	})
}

func TestIsStreamPath(t *testing.T) {
	for path, want := range map[string]bool{
		wire.StreamPath:                         true,
		wire.DotStreamPath("team-a", "dot-1"):   true,
		"/dots/v1/namespaces/a/dots/b/events":   false,
		"/dots/v1/namespaces/a/dots//stream":    false,
		"/dots/v1/namespaces/a/dots/b/stream/x": false,
		"/dots/v1/stream/x":                     false,
		"/dots/v1/hostagent/hosts/h/outbox":     false,
	} {
		if got := wire.IsStreamPath(path); got != want {
			t.Errorf("IsStreamPath(%q) = %v; want %v", path, got, want)
		}
	}
}
