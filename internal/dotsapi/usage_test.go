package dotsapi

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

func TestUsage(t *testing.T) {
	ctx := context.Background()
	e := newGuestEnv(t, guestEnvOptions{})
	dot := e.dots[runningDot.String()]
	seq := int64(0)
	guest := func(typ, data string) store.Event {
		seq++
		s := seq
		return store.Event{Dot: dot, Type: typ, Source: store.SourceGuest, GuestSeq: &s, Data: json.RawMessage(data)}
	}
	host := func(typ, data string) store.Event {
		return store.Event{Dot: dot, Type: typ, Source: store.SourceHost, Data: json.RawMessage(data)}
	}
	if _, err := testStore.AppendEvents(ctx,
		guest(protocol.EventMessageAssistant, `{"text":"hi","spent_usd":0.0125}`),
		// A task's progress is the running total of a task that ends with
		// one of the counted events: it is not added.
		guest(protocol.EventTaskProgress, `{"task_id":"t1","text":"half","spent_usd":0.3}`),
		guest(protocol.EventTaskCompleted, `{"task_id":"t1","summary":"done","spent_usd":0.5}`),
		// The host's own task.failed (a task given up) reports no spend.
		host(wire.EventTaskFailed, `{"task_id":"t2","error":"gave up"}`),
		// A memory pass's spend counts like a turn's.
		guest(protocol.EventMemoryUpdated, `{"conversations":1,"changed":true,"spent_usd":0.1}`),
		// An answer that spent nothing says so by leaving the key out.
		guest(protocol.EventMessageAssistant, `{"text":"free"}`),
	); err != nil {
		t.Fatal(err)
	}
	// The database stamps the events with this machine's clock: a time
	// between the two batches splits them.
	time.Sleep(10 * time.Millisecond)
	between := time.Now()
	time.Sleep(10 * time.Millisecond)
	if _, err := testStore.AppendEvents(ctx,
		guest(protocol.EventTaskFailed, `{"task_id":"t3","error":"boom","spent_usd":0.25}`),
		guest(protocol.EventMessageAssistant, `{"text":"again","spent_usd":0.00000001}`),
	); err != nil {
		t.Fatal(err)
	}
	viewer, err := client.New(e.restConfig("viewer"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := viewer.Usage(ctx, runningDot.Namespace, runningDot.Name, wire.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.0125 + 0.5 + 0.1 + 0.25 + 0.00000001; math.Abs(all.SpentUSD-want) > 1e-9 || all.Since != nil || all.Dot.UID != dot.UID {
		t.Errorf("Usage = %+v; want %v since the first event", all, want)
	}
	recent, err := viewer.Usage(ctx, runningDot.Namespace, runningDot.Name, wire.UsageQuery{Since: &between})
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.25000001; math.Abs(recent.SpentUSD-want) > 1e-9 || recent.Since == nil || !recent.Since.Equal(between) {
		t.Errorf("Usage since %s = %+v; want %v", between, recent, want)
	}
	// A stopped computer's spend is read all the same: it is the log's.
	if _, err := viewer.Usage(ctx, stoppedDot.Namespace, stoppedDot.Name, wire.UsageQuery{}); err != nil {
		t.Errorf("Usage of a stopped Dot: %v", err)
	}

	path := wire.UsagePath(runningDot.Namespace, runningDot.Name)
	for _, tc := range []struct {
		reason string
		who    string
		query  url.Values
		want   answer
	}{
		{"a malformed since", "viewer", url.Values{"since": {"yesterday"}}, answer{http.StatusBadRequest, wire.CodeInvalidRequest, `since "yesterday" is not a time in RFC 3339`}},
		{"a date without a time", "viewer", url.Values{"since": {"2026-01-02"}}, answer{http.StatusBadRequest, wire.CodeInvalidRequest, "RFC 3339"}},
		{"an unknown parameter", "viewer", url.Values{"after": {"1"}}, answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown query parameter "after"`}},
		{"someone without a role", "nobody", nil, answer{http.StatusForbidden, wire.CodeForbidden, "may not get dots/usage"}},
	} {
		if got, _, _ := e.get(t, tc.who, path, tc.query); !got.matches(tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.reason, got, tc.want)
		}
	}
}
