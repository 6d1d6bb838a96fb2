package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"
	"k8s.io/utils/ptr"

	"github.com/invisible-dots/invisible-dots/internal/postgres"
	"github.com/invisible-dots/invisible-dots/internal/postgres/pgtest"
)

// One managed PostgreSQL for the package; tests keep apart by Dot UID.
var testStore *Store

func TestMain(m *testing.M) {
	os.Exit(pgtest.Run(m, func(db *postgres.Instance) { testStore = New(db.Pool()) }))
}

var dotCount atomic.Int64

func newDot(name string) Dot {
	n := dotCount.Add(1)
	return Dot{Namespace: "default", Name: name, UID: fmt.Sprintf("uid-%d-%d", time.Now().UnixNano(), n)}
}

// summary is what a test compares of an event: the store fills in the rest.
type summary struct {
	Type     string
	GuestSeq int64
	Data     string
}

func summarize(events []Event) []summary {
	var out []summary
	for _, e := range events {
		s := summary{Type: e.Type, Data: compact(e.Data)}
		if e.GuestSeq != nil {
			s.GuestSeq = *e.GuestSeq
		}
		out = append(out, s)
	}
	return out
}

func compact(b json.RawMessage) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "invalid: " + string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestAppendEventsIdempotent(t *testing.T) {
	ctx := context.Background()
	dot, other := newDot("helper"), newDot("helper")
	guest := func(d Dot, n int64, typ string) Event {
		return Event{Dot: d, Type: typ, Source: SourceGuest, GuestSeq: ptr.To(n), Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
	}

	first, err := testStore.AppendEvents(ctx, guest(dot, 1, "agent.state"), guest(dot, 2, "task.progress"))
	if err != nil {
		t.Fatal(err)
	}
	// The guest resends 2 (its answer was lost) with 3; the same numbers on
	// another Dot are that Dot's own.
	again, err := testStore.AppendEvents(ctx, guest(dot, 2, "task.progress"), guest(dot, 3, "task.completed"), guest(other, 1, "agent.state"))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		got, want []summary
	}{
		"first append stores both": {got: summarize(first), want: []summary{
			{Type: "agent.state", GuestSeq: 1, Data: `{"n":1}`}, {Type: "task.progress", GuestSeq: 2, Data: `{"n":2}`}}},
		"a resent sequence number is left out": {got: summarize(again), want: []summary{
			{Type: "task.completed", GuestSeq: 3, Data: `{"n":3}`}, {Type: "agent.state", GuestSeq: 1, Data: `{"n":1}`}}},
	}
	for name, tc := range tests {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}

	all, err := testStore.EventsAfter(ctx, dot.UID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{1, 2, 3}, seqs(all)); diff != "" {
		t.Errorf("the Dot's log by guest sequence (-want +got):\n%s", diff)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Errorf("ids not increasing: %d then %d", all[i-1].ID, all[i].ID)
		}
	}
	after, err := testStore.EventsAfter(ctx, dot.UID, all[0].ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{2}, seqs(after)); diff != "" {
		t.Errorf("one event after the first (-want +got):\n%s", diff)
	}
	last, err := testStore.LastGuestSeq(ctx, dot.UID)
	if err != nil || last != 3 {
		t.Errorf("LastGuestSeq = %d, %v; want 3", last, err)
	}
}

func seqs(events []Event) []int64 {
	var out []int64
	for _, e := range events {
		out = append(out, *e.GuestSeq)
	}
	return out
}

func TestHostEventsAndChannelMessages(t *testing.T) {
	ctx := context.Background()
	dot := newDot("helper")
	msg := func(external string) Event {
		return Event{Dot: dot, Type: "message.user", Source: SourceHost,
			Data: json.RawMessage(`{"text":"hi","origin":{"binding_id":"b1","external_id":"` + external + `"}}`)}
	}
	host := Event{Dot: dot, Type: "computer.state", Source: SourceHost}
	stored, err := testStore.AppendEvents(ctx, host, host, msg("m1"), msg("m1"), msg("m2"))
	if err != nil {
		t.Fatal(err)
	}
	want := []summary{
		{Type: "computer.state", Data: `{}`},
		{Type: "computer.state", Data: `{}`},
		{Type: "message.user", Data: `{"origin":{"binding_id":"b1","external_id":"m1"},"text":"hi"}`},
		{Type: "message.user", Data: `{"origin":{"binding_id":"b1","external_id":"m2"},"text":"hi"}`},
	}
	if diff := cmp.Diff(want, summarize(stored)); diff != "" {
		t.Errorf("host events are all kept, a channel message once by its id (-want +got):\n%s", diff)
	}
}

func TestAppendEventsRefusesIncomplete(t *testing.T) {
	tests := map[string]Event{
		"no uid":     {Dot: Dot{Namespace: "default", Name: "x"}, Type: "t", Source: SourceHost},
		"no type":    {Dot: newDot("x"), Source: SourceHost},
		"bad source": {Dot: newDot("x"), Type: "t", Source: "web"},
	}
	for name, e := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := testStore.AppendEvents(context.Background(), e); err == nil {
				t.Errorf("AppendEvents(%+v) succeeded", e)
			}
		})
	}
}

func TestOutbox(t *testing.T) {
	ctx := context.Background()
	dot := newDot("helper")
	now := time.Now().Truncate(time.Microsecond)
	task := Inbound{ID: TaskCreatedID("t-uid", 1), Dot: dot, Type: "task.created", TaskUID: "t-uid", Run: 1,
		Data: json.RawMessage(`{"description":"write"}`)}
	decision := Inbound{ID: ApprovalDecisionID("a-uid"), Dot: dot, Type: "approval.received"}
	msg := Inbound{ID: "message-m1", Dot: dot, Type: "user.message"}

	for _, in := range []Inbound{task, decision, msg} {
		if ok, err := testStore.Enqueue(ctx, in); err != nil || !ok {
			t.Fatalf("Enqueue(%s) = %v, %v; want stored", in.ID, ok, err)
		}
	}
	// A reconcile after a crash enqueues the same decision again: one row.
	if ok, err := testStore.Enqueue(ctx, task); err != nil || ok {
		t.Errorf("Enqueue(%s) again = %v, %v; want not stored", task.ID, ok, err)
	}

	pendingIDs := func() []string {
		t.Helper()
		rows, err := testStore.Pending(ctx, dot.UID)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return ids
	}
	if diff := cmp.Diff([]string{"task-t-uid-1", "approval-a-uid", "message-m1"}, pendingIDs()); diff != "" {
		t.Errorf("pending in enqueue order (-want +got):\n%s", diff)
	}

	// The head fails with a known outcome: the Dot is due again only at retryAt.
	retryAt := now.Add(time.Minute)
	if n, err := testStore.RecordFailure(ctx, task.ID, "connection refused", retryAt); err != nil || n != 1 {
		t.Errorf("RecordFailure = %d, %v; want 1", n, err)
	}
	if due := dueUIDs(t, now, dot.UID); len(due) != 0 {
		t.Errorf("due before its retry time: %v", due)
	}
	if diff := cmp.Diff([]string{dot.UID}, dueUIDs(t, retryAt, dot.UID)); diff != "" {
		t.Errorf("due at its retry time (-want +got):\n%s", diff)
	}

	if ok, err := testStore.MarkSent(ctx, task.ID, now); err != nil || !ok {
		t.Fatalf("MarkSent = %v, %v; want marked", ok, err)
	}
	if err := testStore.MarkDelivered(ctx, task.ID, now); err != nil {
		t.Fatal(err)
	}
	if ok, err := testStore.MarkSent(ctx, task.ID, now); err != nil || ok {
		t.Errorf("MarkSent of a delivered row = %v, %v; want not marked", ok, err)
	}
	if err := testStore.Drop(ctx, msg.ID, "guest refused it", now); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"approval-a-uid"}, pendingIDs()); diff != "" {
		t.Errorf("pending after a delivery and a drop (-want +got):\n%s", diff)
	}
	rows, err := testStore.Pending(ctx, dot.UID)
	if err != nil {
		t.Fatal(err)
	}
	want := Inbound{ID: "approval-a-uid", Dot: dot, Type: "approval.received", Data: json.RawMessage(`{}`)}
	if diff := cmp.Diff(want, rows[0], cmpopts.IgnoreFields(Inbound{}, "Seq", "TS", "CreatedAt")); diff != "" {
		t.Errorf("pending row read back (-want +got):\n%s", diff)
	}

	if err := testStore.MarkDelivered(ctx, "no-such-row", now); err == nil {
		t.Error("MarkDelivered of an unknown id succeeded")
	}
	if err := testStore.DeleteDot(ctx, dot.UID); err != nil {
		t.Fatal(err)
	}
	if ids := pendingIDs(); len(ids) != 0 {
		t.Errorf("rows left after DeleteDot: %v", ids)
	}
}

// dueUIDs is DueDots at now, restricted to the given Dots (other tests share
// the database).
func dueUIDs(t *testing.T, now time.Time, uids ...string) []string {
	t.Helper()
	due, err := testStore.DueDots(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, u := range uids {
		want[u] = true
	}
	var out []string
	for _, d := range due {
		if want[d.UID] {
			out = append(out, d.UID)
		}
	}
	return out
}

func TestDeterministicIDs(t *testing.T) {
	tests := map[string]struct{ got, want string }{
		"task run":          {got: TaskCreatedID("6f1c", 2), want: "task-6f1c-2"},
		"approval decision": {got: ApprovalDecisionID("9a0b"), want: "approval-9a0b"},
		"person's message":  {got: MessageID(42), want: "message-42"},
	}
	for name, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", name, tc.got, tc.want)
		}
	}
}

func TestAppendGuestEventsCursor(t *testing.T) {
	ctx := context.Background()
	dot, other := newDot("helper"), newDot("helper")
	guest := func(n int64) Event {
		return Event{Dot: dot, Type: "agent.state", Source: SourceGuest, GuestSeq: ptr.To(n)}
	}
	tests := []struct {
		reason     string
		batch      []Event
		wantStored []int64
		wantCursor int64
	}{
		{reason: "an empty batch stores nothing and says where the Dot is", wantCursor: 0},
		{reason: "a first batch is stored", batch: []Event{guest(1), guest(2)}, wantStored: []int64{1, 2}, wantCursor: 2},
		{reason: "the same batch again stores nothing", batch: []Event{guest(1), guest(2)}, wantCursor: 2},
		{reason: "a batch overlapping the last stores the new ones", batch: []Event{guest(2), guest(3), guest(4)}, wantStored: []int64{3, 4}, wantCursor: 4},
	}
	for _, tc := range tests {
		stored, cursor, err := testStore.AppendGuestEvents(ctx, dot, tc.batch, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.reason, err)
		}
		if diff := cmp.Diff(tc.wantStored, seqs(stored)); diff != "" || cursor != tc.wantCursor {
			t.Errorf("%s: cursor %d, want %d; stored (-want +got):\n%s", tc.reason, cursor, tc.wantCursor, diff)
		}
	}
	refused := map[string][]Event{
		"an event of another Dot": {{Dot: other, Type: "agent.state", Source: SourceGuest, GuestSeq: ptr.To(int64(1))}},
		"a host event":            {{Dot: dot, Type: "computer.state", Source: SourceHost}},
		"no sequence number":      {{Dot: dot, Type: "agent.state", Source: SourceGuest}},
	}
	for reason, batch := range refused {
		if _, _, err := testStore.AppendGuestEvents(ctx, dot, batch, nil); err == nil {
			t.Errorf("%s: AppendGuestEvents succeeded, want an error", reason)
		}
	}
}

func TestEventsPage(t *testing.T) {
	ctx := context.Background()
	dot := newDot("helper")
	var all []Event
	for _, typ := range []string{"a", "b", "a", "c", "a"} {
		stored, err := testStore.AppendEvents(ctx, Event{Dot: dot, Type: typ, Source: SourceHost})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, stored...)
	}
	id := func(i int) int64 { return all[i].ID }
	tests := []struct {
		reason string
		q      EventQuery
		want   []int64
	}{
		{reason: "every event oldest first", q: EventQuery{Limit: 10}, want: []int64{id(0), id(1), id(2), id(3), id(4)}},
		{reason: "one type", q: EventQuery{Types: []string{"a"}, Limit: 10}, want: []int64{id(0), id(2), id(4)}},
		{reason: "two types, newest first, limited", q: EventQuery{Types: []string{"a", "c"}, Desc: true, Limit: 2}, want: []int64{id(4), id(3)}},
		{reason: "newest first before an id goes on, older", q: EventQuery{Types: []string{"a"}, Desc: true, Before: id(4), Limit: 10}, want: []int64{id(2), id(0)}},
		{reason: "after an id", q: EventQuery{After: id(2), Limit: 10}, want: []int64{id(3), id(4)}},
		{reason: "an id beyond 32 bits is a bound like any", q: EventQuery{Desc: true, Before: 1 << 40, Limit: 1}, want: []int64{id(4)}},
	}
	for _, tc := range tests {
		tc.q.DotUID = dot.UID
		got, err := testStore.Events(ctx, tc.q)
		if err != nil {
			t.Fatalf("%s: %v", tc.reason, err)
		}
		var ids []int64
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		if diff := cmp.Diff(tc.want, ids); diff != "" {
			t.Errorf("%s: Events(%+v) (-want +got):\n%s", tc.reason, tc.q, diff)
		}
	}
}

func TestMessageInOneTransaction(t *testing.T) {
	ctx := context.Background()
	dot, other := newDot("helper"), newDot("helper")
	var id string
	err := testStore.InTx(ctx, func(tx pgx.Tx) error {
		stored, err := AppendEventsTx(ctx, tx, Event{Dot: dot, Type: "message.user", Source: SourceHost, Data: json.RawMessage(`{"text":"hi"}`)})
		if err != nil {
			return err
		}
		id = MessageID(stored[0].ID)
		_, err = EnqueueTx(ctx, tx, Inbound{ID: id, Dot: dot, Type: "user.message", Data: json.RawMessage(`{"text":"hi"}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := testStore.Inbound(ctx, dot.UID, id)
	if err != nil || got.Type != "user.message" {
		t.Errorf("Inbound(%s) = %+v, %v; want the user.message", id, got, err)
	}
	if _, err := testStore.Inbound(ctx, other.UID, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Inbound of another Dot's row = %v, want ErrNotFound", err)
	}

	// A transaction that fails after the event leaves neither row.
	failed := newDot("helper")
	_ = testStore.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := AppendEventsTx(ctx, tx, Event{Dot: failed, Type: "message.user", Source: SourceHost}); err != nil {
			return err
		}
		return errors.New("the enqueue failed")
	})
	if events, err := testStore.EventsAfter(ctx, failed.UID, 0, 10); err != nil || len(events) != 0 {
		t.Errorf("events after a failed transaction: %v, %v; want none", events, err)
	}
}
