package dotsapi

import (
	stdcmp "cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

func outbound(seq int64, typ, data string) protocol.OutboundEvent {
	return protocol.OutboundEvent{Seq: seq, ID: fmt.Sprintf("ev-%d", seq), Type: typ, TS: "2026-08-01T10:00:00Z", Data: json.RawMessage(data)}
}

func batchBody(uid string, events ...protocol.OutboundEvent) string {
	b, err := json.Marshal(wire.EventBatch{DotUID: uid, Events: events})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestIngestEventsAccess(t *testing.T) {
	e := newEnv(t)
	uid := func(key string) string { return e.dots[key].UID }
	ok := func(key string) string {
		return batchBody(uid(key), outbound(1, protocol.EventAgentState, `{"state":"IDLE"}`))
	}
	tests := []struct {
		reason string
		who    string
		path   string
		body   string
		want   answer
	}{
		{reason: "a host agent ingests for its own host's Dot", who: "agent-1",
			path: wire.EventsPath("host-1", "team-a", "helper"), body: ok("team-a/helper"), want: answer{Status: http.StatusOK}},
		{reason: "a host agent acts for any namespace's Dot on its host", who: "agent-1",
			path: wire.EventsPath("host-1", "team-b", "helper"), body: ok("team-b/helper"), want: answer{Status: http.StatusOK}},
		{reason: "an administrator acts for any host", who: "admin",
			path: wire.EventsPath("host-2", "team-a", "far"), body: ok("team-a/far"), want: answer{Status: http.StatusOK}},
		{reason: "a host agent may not name another host", who: "agent-2",
			path: wire.EventsPath("host-1", "team-a", "helper"), body: ok("team-a/helper"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, `may act for its own host only, not for host "host-1"`}},
		{reason: "a host agent may not ingest for a Dot on another host", who: "agent-1",
			path: wire.EventsPath("host-1", "team-a", "far"), body: ok("team-a/far"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, `is not on host "host-1"`}},
		{reason: "an administrator names the host the Dot is on", who: "admin",
			path: wire.EventsPath("host-1", "team-a", "far"), body: ok("team-a/far"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, `is not on host "host-1"`}},
		{reason: "a Computer of the Dot's name that another Dot controls is not the Dot's", who: "agent-1",
			path: wire.EventsPath("host-1", "team-a", "stray"), body: ok("team-a/stray"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, "is not on host"}},
		{reason: "a ServiceAccount named like a host agent in another namespace is not one", who: "impostor",
			path: wire.EventsPath("host-1", "team-a", "helper"), body: ok("team-a/helper"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, "may not update hosts/status"}},
		{reason: "a person with a role on the Dot is not a host agent", who: "editor",
			path: wire.EventsPath("host-1", "team-a", "helper"), body: ok("team-a/helper"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, `user "eddie" may not update hosts/status of "host-1"`}},
		{reason: "a Dot not yet placed has no Computer", who: "admin",
			path: wire.EventsPath("host-1", "team-a", "unplaced"), body: ok("team-a/unplaced"),
			want: answer{http.StatusNotFound, wire.CodeNotFound, "has no Computer"}},
		{reason: "a Dot that does not exist", who: "agent-1",
			path: wire.EventsPath("host-1", "team-a", "ghost"), body: ok("team-a/helper"),
			want: answer{http.StatusNotFound, wire.CodeNotFound, "no Dot ghost"}},
		{reason: "events of a Dot since made again under its name", who: "agent-1",
			path: wire.EventsPath("host-1", "team-a", "helper"), body: ok("team-b/helper"),
			want: answer{http.StatusConflict, wire.CodeDotChanged, "made again"}},
	}
	for _, tc := range tests {
		t.Run(tc.reason, func(t *testing.T) {
			got, body := e.call(t, tc.who, http.MethodPost, tc.path, "application/json", tc.body)
			if !got.matches(tc.want) {
				t.Errorf("POST %s as %s:\ngot  %+v %s\nwant %+v", tc.path, tc.who, got, body, tc.want)
			}
		})
	}
}

func TestIngestEventsBatches(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dot := e.dots["team-a/helper"]
	agent, err := client.New(e.restConfig("agent-1"))
	if err != nil {
		t.Fatal(err)
	}
	ingest := func(events ...protocol.OutboundEvent) wire.Ingested {
		t.Helper()
		got, err := agent.IngestEvents(ctx, "host-1", "team-a", "helper", dot.UID, events)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	state := outbound(1, protocol.EventAgentState, `{"state":"THINKING"}`)
	answer := outbound(2, protocol.EventMessageAssistant, `{"text":"hi","spent_usd":0.5}`)
	bogus := outbound(3, protocol.EventAgentState, `{"state":"DREAMING"}`)
	unknown := outbound(4, "agent.sang", `{}`)
	idle := outbound(5, protocol.EventAgentState, `{"state":"IDLE"}`)

	steps := []struct {
		reason string
		batch  []protocol.OutboundEvent
		want   wire.Ingested
	}{
		{reason: "a fresh Dot's cursor is 0", want: wire.Ingested{Cursor: 0}},
		{reason: "a batch is stored", batch: []protocol.OutboundEvent{state, answer}, want: wire.Ingested{Stored: 2, Cursor: 2}},
		{reason: "the same batch again stores nothing", batch: []protocol.OutboundEvent{state, answer}, want: wire.Ingested{Cursor: 2}},
		{reason: "events the protocol refuses are stored as refused, under their seq", batch: []protocol.OutboundEvent{answer, bogus, unknown},
			want: wire.Ingested{Stored: 2, Refused: 2, Cursor: 4}},
		{reason: "refused events sent again are not stored twice either", batch: []protocol.OutboundEvent{bogus, unknown, idle},
			want: wire.Ingested{Stored: 1, Cursor: 5}},
	}
	for _, s := range steps {
		if diff := cmp.Diff(s.want, ingest(s.batch...)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", s.reason, diff)
		}
	}

	events, err := testStore.EventsAfter(ctx, dot.UID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	type logged struct {
		Seq    int64
		Type   string
		Source store.Source
		Data   map[string]any
	}
	var got []logged
	for _, ev := range events {
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		got = append(got, logged{*ev.GuestSeq, ev.Type, ev.Source, data})
	}
	want := []logged{
		{1, protocol.EventAgentState, store.SourceGuest, map[string]any{"state": "THINKING"}},
		{2, protocol.EventMessageAssistant, store.SourceGuest, map[string]any{"text": "hi", "spent_usd": 0.5}},
		{3, wire.EventGuestRefused, store.SourceGuest, map[string]any{"id": "ev-3", "type": protocol.EventAgentState, "ts": "2026-08-01T10:00:00Z",
			"data": map[string]any{"state": "DREAMING"}, "reason": `data of agent.state (seq 3): unknown state "DREAMING"`}},
		{4, wire.EventGuestRefused, store.SourceGuest, map[string]any{"id": "ev-4", "type": "agent.sang", "ts": "2026-08-01T10:00:00Z",
			"data": map[string]any{}, "reason": `outbound event of seq 4 has unknown type "agent.sang"`}},
		{5, protocol.EventAgentState, store.SourceGuest, map[string]any{"state": "IDLE"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the log holds each event once, by the guest's seq (-want +got):\n%s", diff)
	}
}

func TestIngestEventsRefusesBatches(t *testing.T) {
	e := newEnv(t)
	uid := e.dots["team-a/helper"].UID
	path := wire.EventsPath("host-1", "team-a", "helper")
	many := make([]protocol.OutboundEvent, wire.MaxEventBatch+1)
	for i := range many {
		many[i] = outbound(int64(i+1), protocol.EventAgentStarted, `{}`)
	}
	tests := []struct {
		reason string
		body   string
		want   answer
	}{
		{reason: "the Dot's UID is required", body: `{"events":[]}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "dot_uid is missing"}},
		{reason: "seqs must increase", body: batchBody(uid, outbound(2, protocol.EventAgentStarted, `{}`), outbound(2, protocol.EventAgentStarted, `{}`)),
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "events[1] has seq 2 after 2"}},
		{reason: "a seq starts at 1", body: batchBody(uid, outbound(0, protocol.EventAgentStarted, `{}`)),
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "events[0] has seq 0"}},
		{reason: "a batch has a most", body: batchBody(uid, many...),
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "at most 1000 a batch"}},
		{reason: "an unknown field of the batch is named", body: `{"dot_uid":"` + uid + `","events":[],"host":"x"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown field "host"`}},
		{reason: "an unknown field of an event is named", body: `{"dot_uid":"` + uid + `","events":[{"seq":1,"id":"a","type":"agent.started","ts":"t","data":{},"extra":1}]}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown field "extra"`}},
		{reason: "trailing data is refused", body: batchBody(uid) + " []",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "data after its JSON object"}},
		{reason: "a body over the limit is refused", body: `{"dot_uid":"` + strings.Repeat("u", wire.MaxEventsBody) + `"}`,
			want: answer{http.StatusRequestEntityTooLarge, wire.CodeTooLarge, "larger than"}},
	}
	for _, tc := range tests {
		t.Run(tc.reason, func(t *testing.T) {
			got, _ := e.call(t, "agent-1", http.MethodPost, path, "application/json", tc.body)
			if !got.matches(tc.want) {
				t.Errorf("POST %s with %.80q:\ngot  %+v\nwant %+v", path, tc.body, got, tc.want)
			}
		})
	}
	if events, err := testStore.EventsAfter(context.Background(), uid, 0, 10); err != nil || len(events) != 0 {
		t.Errorf("events after refused batches: %d, %v; want none", len(events), err)
	}
}

func TestOutboxAndAcks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dot, other := e.dots["team-a/helper"], e.dots["team-b/helper"]
	task := store.Inbound{ID: store.TaskCreatedID(dot.UID+"-t", 1), Dot: dot, Type: protocol.InboundTaskCreated, TaskUID: dot.UID + "-t", Run: 1,
		Data: json.RawMessage(`{"task_id":"t","description":"write","priority":0}`)}
	decision := store.Inbound{ID: store.ApprovalDecisionID(dot.UID + "-a"), Dot: dot, Type: protocol.InboundApprovalReceived,
		Data: json.RawMessage(`{"approval_id":"a","decision":"approve"}`)}
	msg := store.Inbound{ID: "message-of-" + dot.UID, Dot: dot, Type: protocol.InboundUserMessage, Data: json.RawMessage(`{"text":"hi"}`)}
	otherMsg := store.Inbound{ID: "message-of-" + other.UID, Dot: other, Type: protocol.InboundUserMessage, Data: json.RawMessage(`{"text":"hi"}`)}
	for _, in := range []store.Inbound{task, decision, msg, otherMsg} {
		if _, err := testStore.Enqueue(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	agent, err := client.New(e.restConfig("agent-1"))
	if err != nil {
		t.Fatal(err)
	}
	pendingIDs := func() []string {
		t.Helper()
		out, err := agent.Outbox(ctx, "host-1", "team-a", "helper")
		if err != nil {
			t.Fatal(err)
		}
		if out.DotUID != dot.UID {
			t.Errorf("outbox of dot %s, want %s", out.DotUID, dot.UID)
		}
		var ids []string
		for _, r := range out.Rows {
			ids = append(ids, r.Event.ID)
		}
		return ids
	}

	out, err := agent.Outbox(ctx, "host-1", "team-a", "helper")
	if err != nil {
		t.Fatal(err)
	}
	wantRows := []wire.OutboxRow{
		{Event: protocol.InboundEvent{ID: task.ID, Type: task.Type, Data: json.RawMessage(`{"task_id":"t","priority":0,"description":"write"}`)}, TaskUID: task.TaskUID, Run: 1},
		{Event: protocol.InboundEvent{ID: decision.ID, Type: decision.Type, Data: json.RawMessage(`{"decision":"approve","approval_id":"a"}`)}},
		{Event: protocol.InboundEvent{ID: msg.ID, Type: msg.Type, Data: json.RawMessage(`{"text":"hi"}`)}},
	}
	ignore := cmpopts.IgnoreFields(wire.OutboxRow{}, "Seq", "CreatedAt")
	ignoreTS := cmpopts.IgnoreFields(protocol.InboundEvent{}, "TS")
	if diff := cmp.Diff(wantRows, out.Rows, ignore, ignoreTS); diff != "" {
		t.Errorf("the Dot's pending rows, in order, as the guest takes them (-want +got):\n%s", diff)
	}
	for _, r := range out.Rows {
		if _, err := protocol.ParseInbound(r.Event); err != nil {
			t.Errorf("row %s is not an inbound event the guest takes: %v", r.Event.ID, err)
		}
		if _, err := time.Parse(time.RFC3339Nano, r.Event.TS); err != nil {
			t.Errorf("row %s has ts %q: %v", r.Event.ID, r.Event.TS, err)
		}
	}

	retryAt := e.clock.Now().Add(time.Minute).UTC()
	// The guest takes the task a second after its send began; the
	// acknowledgement arrives a second after that.
	sent := e.clock.Now()
	answered := sent.Add(time.Second)
	acks := []struct {
		reason string
		id     string
		ack    wire.Ack
		want   wire.Acked
		// later moves the clock on before the acknowledgement.
		later time.Duration
	}{
		{reason: "a send begins", id: task.ID, ack: wire.Ack{Outcome: wire.OutcomeSent},
			want: wire.Acked{ID: task.ID, Outcome: wire.OutcomeSent}},
		{reason: "a known failure counts and sets the retry", id: task.ID, ack: wire.Ack{Outcome: wire.OutcomeFailed, Reason: "POST /v1/agent/events: connection refused", RetryAt: &retryAt},
			want: wire.Acked{ID: task.ID, Outcome: wire.OutcomeFailed, Failures: 1}},
		{reason: "a second failure counts again", id: task.ID, ack: wire.Ack{Outcome: wire.OutcomeFailed, Reason: "POST /v1/agent/events: status 503", RetryAt: &retryAt},
			want: wire.Acked{ID: task.ID, Outcome: wire.OutcomeFailed, Failures: 2}},
		{reason: "the guest takes it at last", id: task.ID, ack: wire.Ack{Outcome: wire.OutcomeDelivered, At: &answered}, later: 2 * time.Second,
			want: wire.Acked{ID: task.ID, Outcome: wire.OutcomeDelivered, Failures: 2}},
		{reason: "a row given up", id: msg.ID, ack: wire.Ack{Outcome: wire.OutcomeDropped, Reason: "the guest refused it (status 400, invalid_request)"},
			want: wire.Acked{ID: msg.ID, Outcome: wire.OutcomeDropped}},
	}
	for _, a := range acks {
		e.clock.SetTime(e.clock.Now().Add(a.later))
		got, err := agent.Ack(ctx, "host-1", "team-a", "helper", a.id, a.ack)
		if err != nil {
			t.Fatalf("%s: %v", a.reason, err)
		}
		if diff := cmp.Diff(a.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", a.reason, diff)
		}
	}
	if diff := cmp.Diff([]string{decision.ID}, pendingIDs()); diff != "" {
		t.Errorf("pending after a delivery and a drop (-want +got):\n%s", diff)
	}
	row, err := testStore.Inbound(ctx, dot.UID, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantRow := struct {
		Sent, Delivered time.Time
		LastError       string
		Failures        int
	}{sent, answered, "POST /v1/agent/events: status 503", 2}
	gotRow := wantRow
	gotRow.Sent, gotRow.Delivered, gotRow.LastError, gotRow.Failures = *row.SentAt, *row.DeliveredAt, row.LastError, row.Failures
	if diff := cmp.Diff(wantRow, gotRow, cmpopts.EquateApproxTime(time.Microsecond)); diff != "" {
		t.Errorf("the task's row as stored (-want +got):\n%s", diff)
	}

	later := e.clock.Now().Add(time.Hour)
	refusals := []struct {
		reason string
		who    string
		method string
		path   string
		body   string
		want   answer
	}{
		{reason: "a row of another Dot is not this Dot's", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", otherMsg.ID), body: `{"outcome":"sent"}`,
			want: answer{http.StatusNotFound, wire.CodeNotFound, "has no outbox row"}},
		{reason: "a failure needs its reason and retry time", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", decision.ID), body: `{"outcome":"failed"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "needs a reason and a retry_at"}},
		{reason: "a delivery takes no reason", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", decision.ID), body: `{"outcome":"delivered","reason":"x"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "takes no reason"}},
		{reason: "a drop needs its reason", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", decision.ID), body: `{"outcome":"dropped"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "needs a reason"}},
		{reason: "a send of a row delivered meanwhile does not begin", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", task.ID), body: `{"outcome":"sent"}`,
			want: answer{http.StatusConflict, wire.CodeNotPending, "delivered or dropped meanwhile"}},
		{reason: "nor one of a row dropped (a cancel won the race)", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", msg.ID), body: `{"outcome":"sent"}`,
			want: answer{http.StatusConflict, wire.CodeNotPending, "delivered or dropped meanwhile"}},
		{reason: "a give-up needs its reason", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", decision.ID), body: `{"outcome":"given_up"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "needs a reason"}},
		{reason: "an outcome of none of the five", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", decision.ID), body: `{"outcome":"lost"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `outcome "lost"`}},
		{reason: "a reason is bounded", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", decision.ID),
			body: `{"outcome":"dropped","reason":"` + strings.Repeat("r", wire.MaxReason+1) + `"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "at most 1024"}},
		{reason: "an unknown field is named", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", decision.ID),
			body: `{"outcome":"failed","reason":"x","retry_at":"` + later.Format(time.RFC3339) + `","when":"now"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown field "when"`}},
		{reason: "only a delivery says when the guest answered", who: "agent-1", path: wire.AckPath("host-1", "team-a", "helper", decision.ID),
			body: `{"outcome":"sent","at":"` + later.Format(time.RFC3339) + `"}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "outcome sent takes no at"}},
		{reason: "another host's agent may not read the outbox", who: "agent-2", method: http.MethodGet, path: wire.OutboxPath("host-1", "team-a", "helper"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, "its own host only"}},
		{reason: "another host's agent may not acknowledge", who: "agent-2", path: wire.AckPath("host-1", "team-a", "helper", decision.ID), body: `{"outcome":"sent"}`,
			want: answer{http.StatusForbidden, wire.CodeForbidden, "its own host only"}},
		{reason: "the outbox of a Dot on another host is not this host's", who: "agent-2", method: http.MethodGet, path: wire.OutboxPath("host-2", "team-a", "helper"),
			want: answer{http.StatusForbidden, wire.CodeForbidden, `is not on host "host-2"`}},
		{reason: "the outbox takes no query", who: "agent-1", method: http.MethodGet, path: wire.OutboxPath("host-1", "team-a", "helper") + "?limit=1",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "no query parameters"}},
	}
	for _, tc := range refusals {
		t.Run(tc.reason, func(t *testing.T) {
			method := stdcmp.Or(tc.method, http.MethodPost)
			got, _ := e.call(t, tc.who, method, tc.path, "application/json", tc.body)
			if !got.matches(tc.want) {
				t.Errorf("%s %s as %s with %.80q:\ngot  %+v\nwant %+v", method, tc.path, tc.who, tc.body, got, tc.want)
			}
		})
	}
	if diff := cmp.Diff([]string{decision.ID}, pendingIDs()); diff != "" {
		t.Errorf("refused acknowledgements changed nothing (-want +got):\n%s", diff)
	}

	// An answer's time outside the send (a clock astray on another host)
	// is not kept: the delivery is the acknowledgement's arrival.
	astray := e.clock.Now().Add(-time.Hour)
	for _, a := range []wire.Ack{{Outcome: wire.OutcomeSent}, {Outcome: wire.OutcomeDelivered, At: &astray}} {
		if _, err := agent.Ack(ctx, "host-1", "team-a", "helper", decision.ID, a); err != nil {
			t.Fatalf("%s: %v", a.Outcome, err)
		}
	}
	row, err = testStore.Inbound(ctx, dot.UID, decision.ID)
	if err != nil {
		t.Fatal(err)
	}
	if row.DeliveredAt == nil || !row.DeliveredAt.Equal(e.clock.Now()) {
		t.Errorf("delivered at %v with an answer time an hour before the send; want the acknowledgement's %v", row.DeliveredAt, e.clock.Now())
	}
}

func TestGiveUpTask(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	dot := e.dots["team-b/helper"]
	taskUID := dot.UID + "-given-up"
	task := store.Inbound{ID: store.TaskCreatedID(taskUID, 2), Dot: dot, Type: protocol.InboundTaskCreated, TaskUID: taskUID, Run: 2,
		Data: json.RawMessage(`{"task_id":"` + taskUID + `","description":"write","priority":0}`)}
	msg := store.Inbound{ID: "message-given-up-" + dot.UID, Dot: dot, Type: protocol.InboundUserMessage, Data: json.RawMessage(`{"text":"hi"}`)}
	for _, in := range []store.Inbound{task, msg} {
		if _, err := testStore.Enqueue(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	agent, err := client.New(e.restConfig("agent-1"))
	if err != nil {
		t.Fatal(err)
	}
	giveUp := wire.Ack{Outcome: wire.OutcomeGivenUp, Reason: "the guest refused task.created (POST /v1/agent/events: status 400, invalid)"}
	steps := []struct {
		reason string
		id     string
		want   wire.Acked
		status int
	}{
		{reason: "a message is never given up", id: msg.ID, status: http.StatusBadRequest},
		{reason: "a task.created is given up and its task fails", id: task.ID,
			want: wire.Acked{ID: task.ID, Outcome: wire.OutcomeGivenUp, TaskFailed: true}},
		{reason: "given up again, the task is not failed twice", id: task.ID,
			want: wire.Acked{ID: task.ID, Outcome: wire.OutcomeGivenUp}},
	}
	for _, s := range steps {
		got, err := agent.Ack(ctx, "host-1", "team-b", "helper", s.id, giveUp)
		if client.StatusOf(err) != s.status || (s.status == 0 && err != nil) {
			t.Errorf("%s: Ack = %v; want status %d", s.reason, err, s.status)
			continue
		}
		if diff := cmp.Diff(s.want, got); s.status == 0 && diff != "" {
			t.Errorf("%s (-want +got):\n%s", s.reason, diff)
		}
	}
	events, err := testStore.EventsAfter(ctx, dot.UID, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []wire.TaskFailed
	for _, ev := range events {
		if ev.Type != wire.EventTaskFailed || ev.Source != store.SourceHost {
			t.Errorf("the log holds %s (%s); want only the host's task.failed", ev.Type, ev.Source)
			continue
		}
		var f wire.TaskFailed
		if err := json.Unmarshal(ev.Data, &f); err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	want := []wire.TaskFailed{{TaskID: taskUID, Run: 2, Error: "the task could not be given to its Dot: " + giveUp.Reason}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the log's task.failed, once, with the task's id and the reason (-want +got):\n%s", diff)
	}
	out, err := agent.Outbox(ctx, "host-1", "team-b", "helper")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range out.Rows {
		ids = append(ids, r.Event.ID)
	}
	if diff := cmp.Diff([]string{msg.ID}, ids); diff != "" {
		t.Errorf("pending after the task was given up (-want +got):\n%s", diff)
	}
}

func TestWaitOutbox(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	agent, err := client.New(e.restConfig("agent-1"))
	if err != nil {
		t.Fatal(err)
	}
	mine := func(refs []wire.DotRef) []string {
		var out []string
		for _, r := range refs {
			for key, d := range e.dots {
				if d.UID == r.UID {
					out = append(out, key)
				}
			}
		}
		return out
	}
	enqueue := func(key, id string) {
		t.Helper()
		if _, err := testStore.Enqueue(ctx, store.Inbound{ID: id + "-" + e.dots[key].UID, Dot: e.dots[key], Type: protocol.InboundUserMessage}); err != nil {
			t.Fatal(err)
		}
	}

	// Without a cursor of this server's: every Dot of the host with rows
	// waiting, at once (none yet).
	first, err := agent.WaitOutbox(ctx, "host-1", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if first.Complete || len(mine(first.Dots)) != 0 || first.Cursor == "" {
		t.Errorf("first answer %+v; want incomplete, a cursor, none of this test's Dots", first)
	}
	cursor := first.Cursor

	// A row of another host's Dot does not end the wait; one of the host's
	// own ends it when its transaction commits.
	type result struct {
		got     wire.OutboxChanges
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		got, err := agent.WaitOutbox(ctx, "host-1", cursor, 20*time.Second)
		done <- result{got, err, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond)
	enqueue("team-a/far", "far")
	time.Sleep(100 * time.Millisecond)
	enqueue("team-a/helper", "helper")
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if diff := cmp.Diff([]string{"team-a/helper"}, mine(r.got.Dots)); diff != "" || !r.got.Complete {
		t.Errorf("the wait ended with %+v (-want +got Dots):\n%s", r.got, diff)
	}
	if r.elapsed > 10*time.Second {
		t.Errorf("the wait ended after %s; want it ended by the row's commit", r.elapsed)
	}
	// Nothing new: the wait ends empty at its time.
	quiet, err := agent.WaitOutbox(ctx, "host-1", r.got.Cursor, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := mine(quiet.Dots); len(got) != 0 || !quiet.Complete {
		t.Errorf("a wait with nothing new answered %+v", quiet)
	}
	// Another server's cursor (a restart) reads every Dot of the host with
	// rows waiting: the helper, not the far Dot.
	again, err := agent.WaitOutbox(ctx, "host-1", "restarted:3", 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"team-a/helper"}, mine(again.Dots)); diff != "" || again.Complete {
		t.Errorf("after a restart: %+v (-want +got Dots):\n%s", again, diff)
	}

	for _, tc := range []struct {
		reason, who, query string
		want               answer
	}{
		{"a host agent waits for its own host only", "agent-2", "wait=0s",
			answer{http.StatusForbidden, wire.CodeForbidden, `not for host "host-1"`}},
		{"a person is not a host agent", "editor", "wait=0s",
			answer{http.StatusForbidden, wire.CodeForbidden, "may not update hosts/status"}},
		{"a wait past the bound", "agent-1", "wait=1m",
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, `wait "1m" is not a duration from 0s to 30s`}},
		{"a cursor that is not one", "agent-1", "after=yesterday",
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, "is not EPOCH:N"}},
		{"an unknown parameter", "agent-1", "limit=5",
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, "not ?limit="}},
	} {
		got, body := e.call(t, tc.who, http.MethodGet, wire.HostOutboxPath("host-1")+"?"+tc.query, "", "")
		if !got.matches(tc.want) {
			t.Errorf("%s: got %+v %s; want %+v", tc.reason, got, body, tc.want)
		}
	}
}
