package dotsapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// Every type the log can hold is in exactly one family: a type added to
// the log without a chip would never be read by the Activity page.
func TestEveryEventTypeHasOneFamily(t *testing.T) {
	seen := map[string]string{}
	for _, f := range activityFamilies {
		for _, typ := range f.Types {
			if !wire.IsEventType(typ) {
				t.Errorf("family %s names %q, which the log cannot hold", f.Name, typ)
			}
			if prev, ok := seen[typ]; ok {
				t.Errorf("%s is in both %s and %s", typ, prev, f.Name)
			}
			seen[typ] = f.Name
		}
	}
	for _, typ := range append(slices.Clone(wire.HostEventTypes), protocol.OutboundTypes...) {
		if _, ok := seen[typ]; !ok {
			t.Errorf("%s has no family", typ)
		}
	}
}

func TestActivityWordsEachEventAsTheCommandLineDoes(t *testing.T) {
	ctx := context.Background()
	e := newGuestEnv(t, guestEnvOptions{})
	dot := e.dots[stoppedDot.String()]
	seq := int64(100)
	guest := func(typ, data string) store.Event {
		seq++
		s := seq
		return store.Event{Dot: dot, Type: typ, Source: store.SourceGuest, GuestSeq: &s, Data: json.RawMessage(data)}
	}
	if _, err := testStore.AppendEvents(ctx,
		store.Event{Dot: dot, Type: wire.EventMessageUser, Source: store.SourceHost, Data: json.RawMessage(`{"text":"list my files"}`)},
		guest(protocol.EventToolCalled, `{"tool":"exec","permission":"computer.exec","decision":"allow","ok":false,"duration_ms":1500,"target":"ls ~"}`),
		guest(protocol.EventMessageAssistant, `{"text":"none","spent_usd":0.5}`),
	); err != nil {
		t.Fatal(err)
	}
	path := "/dots/v1/namespaces/" + stoppedDot.Namespace + "/dots/" + stoppedDot.Name + "/activity"
	got, _, body := e.get(t, "viewer", path, url.Values{"order": {"desc"}, "limit": {"2"}})
	if got.Status != http.StatusOK {
		t.Fatalf("activity: %+v %s", got, body)
	}
	var a Activity
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	if len(a.Events) != 2 || a.Events[0].Type != protocol.EventMessageAssistant || a.Events[1].Type != protocol.EventToolCalled {
		t.Fatalf("events = %+v; want the newest two, newest first", a.Events)
	}
	for _, ev := range a.Events {
		if want := eventtext.Line(ev.Event); ev.Text != want || ev.Text == "" {
			t.Errorf("%s worded %q; eventtext says %q", ev.Type, ev.Text, want)
		}
	}
	if a.Events[1].Text != "ran exec ls ~ (failed) in 1.5s" || a.Events[1].Family != "tools" || a.Events[0].Family != "chat" {
		t.Errorf("tool line %q (%s), answer's family %s", a.Events[1].Text, a.Events[1].Family, a.Events[0].Family)
	}
	if len(a.Families) != len(activityFamilies) {
		t.Errorf("families = %d; want %d", len(a.Families), len(activityFamilies))
	}

	// The types filter and the rest of the events route's query apply.
	_, _, body = e.get(t, "viewer", path, url.Values{"types": {wire.EventMessageUser}})
	a = Activity{}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	if len(a.Events) != 1 || a.Events[0].Text != "you: list my files" {
		t.Errorf("types=message.user: %+v", a.Events)
	}
	for _, tc := range []struct {
		reason string
		who    string
		query  url.Values
		want   answer
	}{
		{"an unknown type", "viewer", url.Values{"types": {"nope"}}, answer{http.StatusBadRequest, wire.CodeInvalidRequest, `"nope" is not an event type`}},
		{"someone without a role", "nobody", nil, answer{http.StatusForbidden, wire.CodeForbidden, "dots/events"}},
	} {
		if got, _, _ := e.get(t, tc.who, path, tc.query); !got.matches(tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.reason, got, tc.want)
		}
	}
}
