package store

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/invisible-dots/invisible-dots/internal/pgtext"
)

// Text PostgreSQL cannot hold is stored escaped, in every table and column
// that takes a guest's or a person's text, and the events after it follow.
func TestTextPostgreSQLCannotHold(t *testing.T) {
	ctx := context.Background()
	dot := newDot("helper")
	hostile := map[string]string{
		"an escaped NUL":           `{"output":"bin\u0000ary"}`,
		"bytes that are not UTF-8": "{\"output\":\"\xff\xfeok\"}",
		"a lone surrogate":         `{"output":"\ud800"}`,
		"a NUL in a member name":   `{"a\u0000":1}`,
	}
	var seq int64
	for reason, data := range hostile {
		seq++
		stored, cursor, err := testStore.AppendGuestEvents(ctx, dot, []Event{{Dot: dot, Type: "tool.called", Source: SourceGuest, GuestSeq: ptr.To(seq), Data: json.RawMessage(data)}}, nil)
		if err != nil || len(stored) != 1 || cursor != seq {
			t.Fatalf("%s: stored %d, cursor %d, err %v; want the event stored and the cursor at %d", reason, len(stored), cursor, err, seq)
		}
		var got map[string]any
		if err := json.Unmarshal(stored[0].Data, &got); err != nil || got[pgtext.EscapedKey] != pgtext.EscapedNote {
			t.Errorf("%s: stored %s (%v), want it marked %q", reason, stored[0].Data, err, pgtext.EscapedKey)
		}
	}
	// A host event (a person's message) and a type the same way.
	if _, err := testStore.AppendEvents(ctx, Event{Dot: dot, Type: "message.user", Source: SourceHost, Data: json.RawMessage(`{"text":"hi\u0000there"}`)}); err != nil {
		t.Fatalf("a person's message with a NUL: %v", err)
	}
	events, err := testStore.Events(ctx, EventQuery{DotUID: dot.UID, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(events); n != len(hostile)+1 {
		t.Fatalf("the log holds %d events, want %d", n, len(hostile)+1)
	}
	if !strings.Contains(string(events[len(events)-1].Data), `hi␀there`) {
		t.Errorf("the message reads %s, want the NUL shown as ␀", events[len(events)-1].Data)
	}

	// The outbox: a row's data and the reasons of its failures and its drop.
	in := Inbound{ID: "message-nul-" + dot.UID, Dot: dot, Type: "user.message", Data: json.RawMessage(`{"text":"a\u0000b"}`)}
	if ok, err := testStore.Enqueue(ctx, in); err != nil || !ok {
		t.Fatalf("enqueue a message with a NUL: stored %v, %v", ok, err)
	}
	if _, err := testStore.RecordFailure(ctx, in.ID, "guest said \x00\xff", timeNow()); err != nil {
		t.Fatalf("record a failure whose reason holds a NUL: %v", err)
	}
	if err := testStore.Drop(ctx, in.ID, "dropped \x00", timeNow()); err != nil {
		t.Fatalf("drop with a reason holding a NUL: %v", err)
	}
	row, err := testStore.Inbound(ctx, dot.UID, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`guest said ␀\xFF`, `dropped ␀`}, []string{row.LastError, row.DropReason}); diff != "" {
		t.Errorf("the reasons stored (-want +got):\n%s", diff)
	}
}

// A guest event PostgreSQL refuses for what it holds, beyond text, is stored
// as the stand-in the caller makes, under its seq, and the batch's other
// events are stored with it: the pump moves on.
func TestGuestEventRefusedByPostgreSQL(t *testing.T) {
	ctx := context.Background()
	dot := newDot("helper")
	batch := []Event{
		{Dot: dot, Type: "agent.state", Source: SourceGuest, GuestSeq: ptr.To(int64(1)), Data: json.RawMessage(`{"state":"IDLE"}`)},
		// Valid JSON, beyond numeric's range: jsonb refuses it.
		{Dot: dot, Type: "tool.called", Source: SourceGuest, GuestSeq: ptr.To(int64(2)), Data: json.RawMessage(`{"n":1e999999}`)},
		{Dot: dot, Type: "agent.state", Source: SourceGuest, GuestSeq: ptr.To(int64(3)), Data: json.RawMessage(`{"state":"RUNNING"}`)},
	}
	if _, _, err := testStore.AppendGuestEvents(ctx, dot, batch, nil); err == nil {
		t.Fatal("without a refuser the batch was stored; want PostgreSQL's refusal (is the test's event still refused?)")
	}
	refuse := func(e Event, reason string) Event {
		data, _ := json.Marshal(map[string]string{"type": e.Type, "reason": reason})
		return Event{Type: "guest.event.refused", Data: data}
	}
	stored, cursor, err := testStore.AppendGuestEvents(ctx, dot, batch, refuse)
	if err != nil {
		t.Fatalf("with a refuser: %v", err)
	}
	if diff := cmp.Diff([]string{"agent.state", "guest.event.refused", "agent.state"}, types(stored)); diff != "" || cursor != 3 {
		t.Fatalf("cursor %d, want 3; stored types (-want +got):\n%s", cursor, diff)
	}
	if !strings.Contains(string(stored[1].Data), "PostgreSQL cannot store it") || *stored[1].GuestSeq != 2 {
		t.Errorf("the stand-in is %s under seq %d, want the reason under seq 2", stored[1].Data, *stored[1].GuestSeq)
	}
}

func types(events []Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Type)
	}
	return out
}
