package store

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecideStoresOnce(t *testing.T) {
	ctx := context.Background()
	d := newDot("decide")
	row := &Inbound{ID: TaskCreatedID("t1", 1), Dot: d, Type: "task.created", Data: json.RawMessage(`{"task_id":"t1"}`), TaskUID: "t1", Run: 1}
	ev := Event{Dot: d, Type: "task.created", Source: SourceHost, Data: json.RawMessage(`{"task_id":"t1","run":1}`)}
	first, err := testStore.Decide(ctx, row, ev)
	if err != nil || len(first) != 1 {
		t.Fatalf("first Decide = %v, %v; want one event stored", first, err)
	}
	again, err := testStore.Decide(ctx, row, ev)
	if err != nil || len(again) != 0 {
		t.Fatalf("the same decision again = %v, %v; want nothing stored", again, err)
	}
	log, err := testStore.EventsAfter(ctx, d.UID, 0, 10)
	if err != nil || len(log) != 1 {
		t.Errorf("log = %v, %v; want the one event", log, err)
	}
	if n, err := testStore.Undelivered(ctx, d.UID); err != nil || n != 1 {
		t.Errorf("Undelivered = %d, %v; want 1", n, err)
	}

	// A decision without a row (a cancel of a task never sent) is its
	// events alone.
	if got, err := testStore.Decide(ctx, nil, Event{Dot: d, Type: "task.cancelled", Source: SourceHost}); err != nil || len(got) != 1 {
		t.Errorf("Decide without a row = %v, %v", got, err)
	}
}

func TestDropUnsent(t *testing.T) {
	ctx := context.Background()
	d := newDot("drop")
	for _, id := range []string{"never-sent", "sent"} {
		if _, err := testStore.Enqueue(ctx, Inbound{ID: id + "-" + d.UID, Dot: d, Type: "task.created"}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := testStore.MarkSent(ctx, "sent-"+d.UID, time.Now()); err != nil || !ok {
		t.Fatalf("MarkSent = %v, %v; want marked", ok, err)
	}
	tests := map[string]struct {
		reason string
		id     string
		want   bool
	}{
		"never sent": {"a row whose send never began is dropped", "never-sent-" + d.UID, true},
		"sent":       {"a row that may have reached the guest is kept", "sent-" + d.UID, false},
		"again":      {"a dropped row is not dropped twice", "never-sent-" + d.UID, false},
	}
	for _, name := range []string{"never sent", "sent", "again"} {
		tc := tests[name]
		if got, err := testStore.DropUnsent(ctx, tc.id, "cancelled"); err != nil || got != tc.want {
			t.Errorf("%s: %s\nDropUnsent = %v, %v; want %v", name, tc.reason, got, err, tc.want)
		}
	}
	if n, _ := testStore.Undelivered(ctx, d.UID); n != 1 {
		t.Errorf("undelivered %d; want the sent row only", n)
	}
	// The deliverer comes after the cancel won: the dropped row is not
	// marked, so it is not sent.
	if ok, err := testStore.MarkSent(ctx, "never-sent-"+d.UID, time.Now()); err != nil || ok {
		t.Errorf("MarkSent of a row the cancel dropped = %v, %v; want not marked", ok, err)
	}
}

func TestDotsWithEventsAfter(t *testing.T) {
	ctx := context.Background()
	_, start, err := testStore.DotsWithEventsAfter(ctx, 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	a, b := newDot("a"), newDot("b")
	if _, err := testStore.AppendEvents(ctx, Event{Dot: a, Type: "x", Source: SourceHost}, Event{Dot: b, Type: "x", Source: SourceHost}, Event{Dot: a, Type: "y", Source: SourceHost}); err != nil {
		t.Fatal(err)
	}
	dots, last, err := testStore.DotsWithEventsAfter(ctx, start, 100)
	if err != nil || len(dots) != 2 || last <= start {
		t.Fatalf("DotsWithEventsAfter(%d) = %v, %d, %v; want a and b and a higher id", start, dots, last, err)
	}
	if dots, again, _ := testStore.DotsWithEventsAfter(ctx, last, 100); len(dots) != 0 || again != last {
		t.Errorf("after the last id: %v, %d; want nothing, %d", dots, again, last)
	}
}

func TestNamespacesAndTheirDeletion(t *testing.T) {
	ctx := context.Background()
	d := newDot("ns")
	d.Namespace = "gone-" + d.UID[len(d.UID)-6:]
	if _, err := testStore.Decide(ctx, &Inbound{ID: "row-" + d.UID, Dot: d, Type: "user.message"}, Event{Dot: d, Type: "message.user", Source: SourceHost}); err != nil {
		t.Fatal(err)
	}
	if err := testStore.DropUndelivered(ctx, d.UID, "the Dot was deleted"); err != nil {
		t.Fatal(err)
	}
	if n, _ := testStore.Undelivered(ctx, d.UID); n != 0 {
		t.Errorf("undelivered after the drop: %d", n)
	}
	if log, _ := testStore.EventsAfter(ctx, d.UID, 0, 10); len(log) != 1 {
		t.Errorf("the log of a deleted Dot: %d events; want its history kept", len(log))
	}
	nss, err := testStore.Namespaces(ctx)
	if err != nil || !slices.Contains(nss, d.Namespace) {
		t.Fatalf("Namespaces = %v, %v; want %s among them", nss, err, d.Namespace)
	}
	if err := testStore.DeleteNamespace(ctx, d.Namespace); err != nil {
		t.Fatal(err)
	}
	if log, _ := testStore.EventsAfter(ctx, d.UID, 0, 10); len(log) != 0 {
		t.Errorf("after its namespace went: %d events; want none", len(log))
	}
}

func TestGiveUpTask(t *testing.T) {
	ctx := context.Background()
	d := newDot("give-up")
	task := Inbound{ID: TaskCreatedID("t-"+d.UID, 1), Dot: d, Type: "task.created", TaskUID: "t-" + d.UID, Run: 1}
	delivered := Inbound{ID: TaskCreatedID("t2-"+d.UID, 1), Dot: d, Type: "task.created", TaskUID: "t2-" + d.UID, Run: 1}
	message := Inbound{ID: "message-" + d.UID, Dot: d, Type: "user.message"}
	for _, in := range []Inbound{task, delivered, message} {
		if _, err := testStore.Enqueue(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := testStore.MarkDelivered(ctx, delivered.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	failed := func(taskUID string) Event {
		return Event{Dot: d, Type: "task.failed", Source: SourceHost, Data: json.RawMessage(`{"task_id":"` + taskUID + `"}`)}
	}
	// In order: each step sees the ones before.
	steps := []struct {
		reason string
		id     string
		want   bool
	}{
		{"a task.created pending is given up", task.ID, true},
		{"a row given up is not given up twice (and logged once)", task.ID, false},
		{"a delivered task.created stays delivered", delivered.ID, false},
		{"a message is never given up", message.ID, false},
	}
	for _, s := range steps {
		if got, err := testStore.GiveUpTask(ctx, s.id, "the guest refused it", time.Now(), failed(s.id)); err != nil || got != s.want {
			t.Errorf("%s\nGiveUpTask(%s) = %v, %v; want %v", s.reason, s.id, got, err, s.want)
		}
	}
	log, err := testStore.EventsAfter(ctx, d.UID, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]summary{{Type: "task.failed", Data: `{"task_id":"` + task.ID + `"}`}}, summarize(log)); diff != "" {
		t.Errorf("the log holds the one task.failed (-want +got):\n%s", diff)
	}
	pending, err := testStore.Pending(ctx, d.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].ID != message.ID {
		t.Errorf("pending = %+v; want the message alone", pending)
	}
	row, err := testStore.Inbound(ctx, d.UID, task.ID)
	if err != nil || row.DroppedAt == nil || row.DropReason != "the guest refused it" {
		t.Errorf("the given-up row = %+v, %v; want dropped with its reason", row, err)
	}
}
