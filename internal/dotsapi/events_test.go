package dotsapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

func TestEvents(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dot := e.dots["team-a/helper"]
	seq := int64(0)
	guest := func(typ, data string) store.Event {
		seq++
		s := seq
		return store.Event{Dot: dot, Type: typ, Source: store.SourceGuest, GuestSeq: &s, Data: json.RawMessage(data)}
	}
	host := func(typ, data string) store.Event {
		return store.Event{Dot: dot, Type: typ, Source: store.SourceHost, Data: json.RawMessage(data)}
	}
	stored, err := testStore.AppendEvents(ctx,
		host(wire.EventTaskCreated, `{"task_id":"t1","task":"build","run":1}`),
		guest(protocol.EventTaskStarted, `{"task_id":"t1"}`),
		guest(protocol.EventToolCalled, `{"task_id":"t1","tool":"exec","target":"make"}`),
		guest(protocol.EventToolCalled, `{"task_id":"t1","tool":"read_file","target":"a.go"}`),
		host(wire.EventMessageUser, `{"text":"hi"}`),
		guest(protocol.EventToolCalled, `{"tool":"exec","target":"ls"}`),
		guest(protocol.EventTaskCompleted, `{"task_id":"t1","summary":"built"}`),
	)
	if err != nil || len(stored) != 7 {
		t.Fatalf("AppendEvents = %d events, %v", len(stored), err)
	}
	ids := func(k ...int) []int64 {
		var out []int64
		for _, i := range k {
			out = append(out, stored[i].ID)
		}
		return out
	}
	viewer, err := client.New(e.restConfig("viewer"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		reason string
		q      wire.EventsQuery
		want   []int64
	}{
		{"the whole log, oldest first", wire.EventsQuery{}, ids(0, 1, 2, 3, 4, 5, 6)},
		{"after an id", wire.EventsQuery{After: stored[4].ID}, ids(5, 6)},
		{"newest first, a limit keeps the newest", wire.EventsQuery{Order: wire.OrderDesc, Limit: 2}, ids(6, 5)},
		{"before goes on, older", wire.EventsQuery{Order: wire.OrderDesc, Before: stored[5].ID, Limit: 2}, ids(4, 3)},
		{"types", wire.EventsQuery{Types: []string{protocol.EventToolCalled, wire.EventMessageUser}}, ids(2, 3, 4, 5)},
		{"tools narrow tool.called and let the other types pass", wire.EventsQuery{Tools: []string{"exec"}}, ids(0, 1, 2, 4, 5, 6)},
		{"a task's story", wire.EventsQuery{Task: "t1"}, ids(0, 1, 2, 3, 6)},
		{"all of them at once", wire.EventsQuery{Task: "t1", Types: []string{protocol.EventToolCalled}, Tools: []string{"exec"}}, ids(2)},
	} {
		got, err := viewer.Events(ctx, "team-a", "helper", tc.q)
		if err != nil {
			t.Fatalf("%s: %v", tc.reason, err)
		}
		var gotIDs []int64
		for _, ev := range got.Events {
			gotIDs = append(gotIDs, ev.ID)
		}
		if diff := cmp.Diff(tc.want, gotIDs); diff != "" {
			t.Errorf("%s: ids (-want +got):\n%s", tc.reason, diff)
		}
	}
	page, err := viewer.Events(ctx, "team-a", "helper", wire.EventsQuery{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	first := page.Events[2]
	if first.Type != protocol.EventToolCalled || first.Source != "guest" || first.GuestSeq == nil || *first.GuestSeq != 2 ||
		string(first.Data) != `{"tool":"exec","target":"make","task_id":"t1"}` || first.CreatedAt.IsZero() {
		t.Errorf("an event reads %+v (data %s)", first, first.Data)
	}

	path := wire.DotEventsPath("team-a", "helper")
	for _, tc := range []struct {
		reason, who, query string
		want               answer
	}{
		{"a viewer reads the log", "viewer", "", answer{Status: http.StatusOK}},
		{"someone with no role on the Dot", "nobody", "", answer{http.StatusForbidden, wire.CodeForbidden, "may not get dots/events"}},
		{"a limit above the page", "viewer", "limit=1001", answer{http.StatusBadRequest, wire.CodeInvalidRequest, "limit 1001 is above 1000"}},
		{"an unknown type is named", "viewer", "types=tool.called,tool.sang", answer{http.StatusBadRequest, wire.CodeInvalidRequest, `"tool.sang" is not an event type`}},
		{"before reads newest first only", "viewer", "before=5", answer{http.StatusBadRequest, wire.CodeInvalidRequest, "needs order=desc"}},
		{"an unknown parameter", "viewer", "task_id=t1", answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown query parameter "task_id"`}},
		{"a bad id", "viewer", "after=x", answer{http.StatusBadRequest, wire.CodeInvalidRequest, `after "x" is not an event id`}},
	} {
		got, body := e.call(t, tc.who, http.MethodGet, path+"?"+tc.query, "", "")
		if !got.matches(tc.want) {
			t.Errorf("%s: got %+v %s; want %+v", tc.reason, got, body, tc.want)
		}
	}
}
