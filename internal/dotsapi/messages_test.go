package dotsapi

import (
	stdcmp "cmp"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/utils/ptr"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

func TestPostMessageRefusals(t *testing.T) {
	e := newEnv(t)
	path := wire.MessagesPath("team-a", "helper")
	const ok = `{"text":"hello"}`
	tests := []struct {
		reason      string
		who, method string
		path        string
		contentType string
		body        string
		want        answer
	}{
		{reason: "the viewer may read and not post", who: "viewer", body: ok,
			want: answer{http.StatusForbidden, wire.CodeForbidden, `user "vera" may not create dots/messages of "team-a/helper"`}},
		{reason: "the editor of team-a may not post in team-b", who: "editor", path: wire.MessagesPath("team-b", "helper"), body: ok,
			want: answer{http.StatusForbidden, wire.CodeForbidden, "may not create dots/messages"}},
		{reason: "someone without a role may not post", who: "nobody", body: ok,
			want: answer{http.StatusForbidden, wire.CodeForbidden, "nora"}},
		{reason: "a host agent is not a person", who: "agent-1", body: ok,
			want: answer{http.StatusForbidden, wire.CodeForbidden, "may not create"}},
		{reason: "an unknown field is named", who: "editor", body: `{"txt":"hello"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown field "txt"`}},
		{reason: "data after the object is refused", who: "editor", body: ok + `{"text":"again"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "data after its JSON object"}},
		{reason: "an empty body is refused", who: "editor", body: "",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "the body is empty"}},
		{reason: "a message needs words", who: "editor", body: `{"text":"  \n"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "text is empty"}},
		{reason: "text of the wrong type is named", who: "editor", body: `{"text":5}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "text"}},
		{reason: "a body over the limit is refused", who: "editor", body: `{"text":"` + strings.Repeat("a", wire.MaxMessageBody) + `"}`,
			want: answer{http.StatusRequestEntityTooLarge, wire.CodeTooLarge, "larger than"}},
		{reason: "a body that is not JSON is refused", who: "editor", contentType: "text/plain", body: "hello",
			want: answer{http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType, "application/json"}},
		{reason: "a Dot that does not exist", who: "editor", path: wire.MessagesPath("team-a", "ghost"), body: ok,
			want: answer{http.StatusNotFound, wire.CodeNotFound, "no Dot ghost"}},
		{reason: "a Dot being deleted takes no messages", who: "editor", path: wire.MessagesPath("team-a", "leaving"), body: ok,
			want: answer{http.StatusConflict, wire.CodeDotDeleting, "being deleted"}},
		{reason: "a namespace that cannot be one", who: "editor", path: "/dots/v1/namespaces/Team_A/dots/helper/messages", body: ok,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "the namespace"}},
		{reason: "a method the route has not", who: "editor", method: http.MethodDelete,
			want: answer{http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "does not take DELETE"}},
		{reason: "a route that does not exist", who: "editor", path: "/dots/v1/namespaces/team-a/dots/helper/nothing",
			want: answer{http.StatusNotFound, wire.CodeNotFound, "no route"}},
	}
	for _, tc := range tests {
		t.Run(tc.reason, func(t *testing.T) {
			method, p, ct := stdcmp.Or(tc.method, http.MethodPost), stdcmp.Or(tc.path, path), stdcmp.Or(tc.contentType, "application/json")
			got, _ := e.call(t, tc.who, method, p, ct, tc.body)
			if !got.matches(tc.want) {
				t.Errorf("%s %s as %s with %.60q:\ngot  %+v\nwant %+v", method, p, tc.who, tc.body, got, tc.want)
			}
		})
	}
	// Nothing refused was logged or queued.
	dot := e.dots["team-a/helper"]
	if events, err := testStore.EventsAfter(context.Background(), dot.UID, 0, 10); err != nil || len(events) != 0 {
		t.Errorf("events after refused posts: %v, %v; want none", events, err)
	}
	if rows, err := testStore.Pending(context.Background(), dot.UID); err != nil || len(rows) != 0 {
		t.Errorf("outbox after refused posts: %v, %v; want none", rows, err)
	}
}

func TestPostMessageLogsAndQueues(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c, err := client.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	dot := e.dots["team-a/helper"]
	accepted, err := c.PostMessage(ctx, "team-a", "helper", "book the 9:40 train")
	if err != nil {
		t.Fatal(err)
	}
	if !accepted.Queued || accepted.EventID == 0 {
		t.Errorf("PostMessage = %+v, want an event id and queued", accepted)
	}
	events, err := testStore.EventsAfter(ctx, dot.UID, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	type logged struct {
		ID     int64
		Type   string
		Source store.Source
		Data   string
	}
	var gotEvents []logged
	for _, ev := range events {
		gotEvents = append(gotEvents, logged{ev.ID, ev.Type, ev.Source, string(ev.Data)})
	}
	wantEvents := []logged{{accepted.EventID, wire.EventMessageUser, store.SourceHost, `{"text": "book the 9:40 train"}`}}
	if diff := cmp.Diff(wantEvents, gotEvents); diff != "" {
		t.Errorf("the message is logged as message.user (-want +got):\n%s", diff)
	}
	rows, err := testStore.Pending(ctx, dot.UID)
	if err != nil {
		t.Fatal(err)
	}
	wantRows := []store.Inbound{{ID: store.MessageID(accepted.EventID), Dot: dot, Type: protocol.InboundUserMessage, Data: json.RawMessage(`{"text": "book the 9:40 train"}`)}}
	if diff := cmp.Diff(wantRows, rows, cmpopts.IgnoreFields(store.Inbound{}, "Seq", "TS", "CreatedAt")); diff != "" {
		t.Errorf("the message is queued as user.message, its id from the event (-want +got):\n%s", diff)
	}
}

func TestGetMessages(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dot := e.dots["team-a/helper"]
	editor, err := client.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	// A conversation with other events between its messages: two messages,
	// an answer, a tool call, a third message and its answer.
	var ids []int64
	post := func(text string) {
		a, err := editor.PostMessage(ctx, "team-a", "helper", text)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.EventID)
	}
	guest := func(seq int64, typ, data string) {
		stored, _, err := testStore.AppendGuestEvents(ctx, dot, []store.Event{{Dot: dot, Type: typ, Source: store.SourceGuest, GuestSeq: &seq, Data: json.RawMessage(data)}}, nil)
		if err != nil || len(stored) != 1 {
			t.Fatalf("store guest event %d: %v", seq, err)
		}
		ids = append(ids, stored[0].ID)
	}
	post("first")
	post("second")
	guest(1, protocol.EventMessageAssistant, `{"text":"both read","in_reply_to":"`+store.MessageID(ids[1])+`","spent_usd":0.25}`)
	guest(2, protocol.EventToolCalled, `{"tool":"exec","permission":"computer.exec","decision":"allow","ok":true,"duration_ms":3}`)
	// The third came through a messaging channel: the conversation says so.
	viaTelegram, err := testStore.PostMessage(ctx, dot, "third", store.Origin{Channel: "telegram", BindingID: "b1", ChatID: "42", ExternalID: "777:3"})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, viaTelegram.EventID)
	guest(3, protocol.EventMessageAssistant, `{"text":"done"}`)

	user := func(i int, text string) wire.Message {
		return wire.Message{EventID: ids[i], Role: wire.RoleUser, Text: text, MessageID: store.MessageID(ids[i])}
	}
	first, second := user(0, "first"), user(1, "second")
	reply := wire.Message{EventID: ids[2], Role: wire.RoleAssistant, Text: "both read", InReplyTo: store.MessageID(ids[1]), SpentUSD: ptr.To(0.25)}
	third := user(4, "third")
	third.Via = "telegram"
	done := wire.Message{EventID: ids[5], Role: wire.RoleAssistant, Text: "done"}

	tests := []struct {
		reason string
		who    string
		q      wire.MessagesQuery
		want   []wire.Message
	}{
		{reason: "oldest first by default, without the other events", who: "editor", want: []wire.Message{first, second, reply, third, done}},
		{reason: "the viewer may read", who: "viewer", q: wire.MessagesQuery{Limit: 2}, want: []wire.Message{first, second}},
		{reason: "newest first, limited", who: "editor", q: wire.MessagesQuery{Order: wire.OrderDesc, Limit: 2}, want: []wire.Message{done, third}},
		{reason: "before goes on, older", who: "editor", q: wire.MessagesQuery{Order: wire.OrderDesc, Limit: 2, Before: ids[4]}, want: []wire.Message{reply, second}},
		{reason: "the last page is short", who: "editor", q: wire.MessagesQuery{Order: wire.OrderDesc, Limit: 2, Before: ids[1]}, want: []wire.Message{first}},
		{reason: "the most a page holds is allowed", who: "editor", q: wire.MessagesQuery{Limit: wire.MaxMessagesPage}, want: []wire.Message{first, second, reply, third, done}},
	}
	for _, tc := range tests {
		t.Run(tc.reason, func(t *testing.T) {
			c, err := client.New(e.restConfig(tc.who))
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Messages(ctx, "team-a", "helper", tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Messages, cmpopts.IgnoreFields(wire.Message{}, "CreatedAt")); diff != "" {
				t.Errorf("Messages(%+v) (-want +got):\n%s", tc.q, diff)
			}
		})
	}

	refusals := []struct {
		reason string
		who    string
		path   string
		query  string
		want   answer
	}{
		{reason: "a page above 500 is refused, not cut", who: "editor", query: "?limit=501",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "limit 501 is above 500"}},
		{reason: "a page of nothing is refused", who: "editor", query: "?limit=0",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "limit"}},
		{reason: "an order that is neither", who: "editor", query: "?order=newest",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `order "newest"`}},
		{reason: "before goes with desc only", who: "editor", query: "?before=5",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "order=desc"}},
		{reason: "a misspelt parameter is named", who: "editor", query: "?limt=5",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown query parameter "limt"`}},
		{reason: "a parameter given twice", who: "editor", query: "?limit=5&limit=6",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "given 2 times"}},
		{reason: "someone without a role may not read", who: "nobody",
			want: answer{http.StatusForbidden, wire.CodeForbidden, "may not get dots/messages"}},
		{reason: "the editor of team-a may not read team-b", who: "editor", path: wire.MessagesPath("team-b", "helper"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, `"team-b/helper"`}},
	}
	for _, tc := range refusals {
		t.Run(tc.reason, func(t *testing.T) {
			p := stdcmp.Or(tc.path, wire.MessagesPath("team-a", "helper"))
			got, _ := e.call(t, tc.who, http.MethodGet, p+tc.query, "", "")
			if !got.matches(tc.want) {
				t.Errorf("GET %s%s as %s:\ngot  %+v\nwant %+v", p, tc.query, tc.who, got, tc.want)
			}
		})
	}
}
