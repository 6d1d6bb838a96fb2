package store

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPostMessageLogsAndQueuesTogether(t *testing.T) {
	ctx := context.Background()
	dot := newDot("helper")
	api := Origin{Channel: ChannelAPI}
	first, err := testStore.PostMessage(ctx, dot, "book the 9:40 train", api)
	if err != nil {
		t.Fatal(err)
	}
	// The same words again are another message: nothing makes a post
	// idempotent.
	second, err := testStore.PostMessage(ctx, dot, "book the 9:40 train", api)
	if err != nil {
		t.Fatal(err)
	}

	events, err := testStore.EventsAfter(ctx, dot.UID, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var gotPosted []PostedMessage
	for _, e := range events {
		gotPosted = append(gotPosted, PostedMessage{EventID: e.ID, MessageID: MessageID(e.ID), CreatedAt: e.CreatedAt})
	}
	if diff := cmp.Diff([]PostedMessage{first, second}, gotPosted); diff != "" {
		t.Errorf("PostMessage returns the events it logged, the id from the event (-want +got):\n%s", diff)
	}
	wantEvents := []summary{
		{Type: "message.user", Data: `{"text":"book the 9:40 train"}`},
		{Type: "message.user", Data: `{"text":"book the 9:40 train"}`},
	}
	if diff := cmp.Diff(wantEvents, summarize(events)); diff != "" {
		t.Errorf("each message is logged as message.user, with no origin for the Dots API (-want +got):\n%s", diff)
	}
	for _, e := range events {
		if e.Source != SourceHost {
			t.Errorf("event %d has source %q, want %q: the control plane tells of a person's message", e.ID, e.Source, SourceHost)
		}
	}

	rows, err := testStore.Pending(ctx, dot.UID)
	if err != nil {
		t.Fatal(err)
	}
	data := json.RawMessage(`{"text": "book the 9:40 train"}`)
	wantRows := []Inbound{
		{ID: first.MessageID, Dot: dot, Type: "user.message", Data: data, TS: first.CreatedAt},
		{ID: second.MessageID, Dot: dot, Type: "user.message", Data: data, TS: second.CreatedAt},
	}
	if diff := cmp.Diff(wantRows, rows, cmpopts.IgnoreFields(Inbound{}, "Seq", "CreatedAt")); diff != "" {
		t.Errorf("each message is queued as user.message under its event's id, at the event's time (-want +got):\n%s", diff)
	}
}

func TestPostMessageRefusals(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		reason string
		dot    Dot
		text   string
		from   Origin
		want   string
	}{
		"empty": {
			reason: "a message needs words",
			dot:    newDot("helper"), text: " \n\t", from: Origin{Channel: ChannelAPI},
			want: "is empty",
		},
		"channel without its ids": {
			reason: "a channel's message is stored once by its own id, so it needs one",
			dot:    newDot("helper"), text: "hello", from: Origin{Channel: "telegram", BindingID: "b1", ChatID: "42"},
			want: `from channel "telegram" needs its binding, its chat and the channel's id`,
		},
		"api with a channel's ids": {
			reason: "only a channel's message has a binding",
			dot:    newDot("helper"), text: "hello", from: Origin{Channel: ChannelAPI, BindingID: "b1"},
			want: "has no channel binding",
		},
		"no origin": {
			reason: "an origin is said, never assumed",
			dot:    newDot("helper"), text: "hello",
			want: `from channel ""`,
		},
		"incomplete dot": {
			reason: "a Dot's rows need its uid",
			dot:    Dot{Namespace: "default", Name: "helper"}, text: "hello", from: Origin{Channel: ChannelAPI},
			want: "lacks its namespace, name or uid",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := testStore.PostMessage(ctx, tc.dot, tc.text, tc.from)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: PostMessage(%+v, %q, %+v) = %v, want an error saying %q", tc.reason, tc.dot, tc.text, tc.from, err, tc.want)
			}
			if tc.dot.UID == "" {
				return
			}
			if events, err := testStore.EventsAfter(ctx, tc.dot.UID, 0, 10); err != nil || len(events) != 0 {
				t.Errorf("%s: events after a refused message: %v, %v; want none", tc.reason, events, err)
			}
			if rows, err := testStore.Pending(ctx, tc.dot.UID); err != nil || len(rows) != 0 {
				t.Errorf("%s: outbox after a refused message: %v, %v; want none", tc.reason, rows, err)
			}
		})
	}
}

func TestPostMessageFromAChannelIsStoredOnceByItsOrigin(t *testing.T) {
	ctx := context.Background()
	dot := newDot("phone")
	from := Origin{Channel: "telegram", BindingID: "bind-1", ChatID: "4242", ExternalID: "7:1001"}
	first, err := testStore.PostMessage(ctx, dot, "are you there?", from)
	if err != nil {
		t.Fatal(err)
	}
	if first.Redelivered {
		t.Errorf("the first delivery is marked redelivered")
	}
	// Telegram offers the update again (the offset was not confirmed):
	// the first message answers, nothing is stored or queued again.
	again, err := testStore.PostMessage(ctx, dot, "are you there?", from)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Redelivered || again.EventID != first.EventID || again.MessageID != first.MessageID {
		t.Errorf("a redelivery = %+v; want the first message %+v, redelivered", again, first)
	}
	// Another message of the same chat is another message; the same
	// channel id through another binding (another bot) too.
	other := from
	other.ExternalID = "7:1002"
	if _, err := testStore.PostMessage(ctx, dot, "hello?", other); err != nil {
		t.Fatal(err)
	}
	otherBot := from
	otherBot.BindingID = "bind-2"
	if p, err := testStore.PostMessage(ctx, dot, "are you there?", otherBot); err != nil || p.Redelivered {
		t.Fatalf("the same channel id through another binding: %+v, %v; want a new message", p, err)
	}

	events, err := testStore.EventsAfter(ctx, dot.UID, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []summary{
		{Type: "message.user", Data: `{"origin":{"binding_id":"bind-1","channel":"telegram","chat_id":"4242","external_id":"7:1001"},"text":"are you there?"}`},
		{Type: "message.user", Data: `{"origin":{"binding_id":"bind-1","channel":"telegram","chat_id":"4242","external_id":"7:1002"},"text":"hello?"}`},
		{Type: "message.user", Data: `{"origin":{"binding_id":"bind-2","channel":"telegram","chat_id":"4242","external_id":"7:1001"},"text":"are you there?"}`},
	}
	if diff := cmp.Diff(want, summarize(events)); diff != "" {
		t.Errorf("a channel's messages are logged with their origin, each once (-want +got):\n%s", diff)
	}
	rows, err := testStore.Pending(ctx, dot.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Errorf("%d rows for the guest; want 3, the redelivery none", len(rows))
	}
	for _, r := range rows {
		if strings.Contains(string(r.Data), "origin") || strings.Contains(string(r.Data), "4242") {
			t.Errorf("the guest is given the origin: %s; it receives the text only", r.Data)
		}
	}
}
