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
		"channel": {
			reason: "a channel's message is stored once by its own id, which the log does not hold",
			dot:    newDot("helper"), text: "hello", from: Origin{Channel: "telegram"},
			want: `from "telegram"`,
		},
		"no origin": {
			reason: "an origin is said, never assumed",
			dot:    newDot("helper"), text: "hello",
			want: `from ""`,
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
