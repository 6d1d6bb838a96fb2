package dotsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/pgtext"
)

// rawBatch is an ingestion body whose events' data are raw bytes, as a
// guest may send them (json.Marshal would replace bytes that are not UTF-8).
func rawBatch(uid string, firstSeq int64, data ...string) string {
	var events []string
	for i, d := range data {
		seq := firstSeq + int64(i)
		events = append(events, fmt.Sprintf(`{"seq":%d,"id":"ev-%d","type":%q,"ts":"2026-08-01T10:00:00Z","data":%s}`,
			seq, seq, protocol.EventMessageAssistant, d))
	}
	return fmt.Sprintf(`{"dot_uid":%q,"events":[%s]}`, uid, strings.Join(events, ","))
}

// One NUL, bytes that are not UTF-8 or a number PostgreSQL cannot hold in a
// guest's event never stop the Dot's log: each is stored (escaped, or as
// guest.event.refused) and the events after it follow.
func TestIngestTextPostgreSQLCannotHold(t *testing.T) {
	e := newEnv(t)
	dot := e.dots["team-a/helper"]
	path := wire.EventsPath("host-1", "team-a", "helper")
	body := rawBatch(dot.UID, 1,
		`{"text":"binary \u0000 output"}`,
		"{\"text\":\"latin-1 caf\xe9\"}",
		`{"text":"a lone \udc00 half"}`,
		`{"text":"x","spent_usd":1e999999}`,
		`{"text":"and the next answer"}`)
	got, data := e.call(t, "agent-1", http.MethodPost, path, "application/json", body)
	if got.Status != http.StatusOK {
		t.Fatalf("ingestion answered %+v %s, want 200", got, data)
	}
	var ing wire.Ingested
	if err := json.Unmarshal(data, &ing); err != nil || ing.Cursor != 5 || ing.Stored != 5 {
		t.Fatalf("ingestion = %s (%v), want all 5 stored and the cursor at 5", data, err)
	}
	events, err := testStore.EventsAfter(context.Background(), dot.UID, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantType := []string{protocol.EventMessageAssistant, protocol.EventMessageAssistant, protocol.EventMessageAssistant, wire.EventGuestRefused, protocol.EventMessageAssistant}
	wantText := []string{"binary ␀ output", `latin-1 caf\\xE9`, `a lone \\udc00 half`, "PostgreSQL cannot store it", "and the next answer"}
	for i, ev := range events {
		if ev.Type != wantType[i] || !strings.Contains(string(ev.Data), wantText[i]) {
			t.Errorf("event %d is %s %s; want %s holding %q", i+1, ev.Type, ev.Data, wantType[i], wantText[i])
		}
	}
}

func TestPostMessageWithNUL(t *testing.T) {
	e := newEnv(t)
	dot := e.dots["team-a/helper"]
	got, data := e.call(t, "editor", http.MethodPost, wire.MessagesPath("team-a", "helper"), "application/json", `{"text":"paste \u0000 of a binary"}`)
	if got.Status >= 300 {
		t.Fatalf("POST messages answered %+v %s, want it taken", got, data)
	}
	events, err := testStore.EventsAfter(context.Background(), dot.UID, 0, 10)
	if err != nil || len(events) != 1 || !strings.Contains(string(events[0].Data), "paste ␀ of a binary") {
		t.Fatalf("the log holds %v (%v), want the message with its NUL shown as ␀", events, err)
	}
	rows, err := testStore.Pending(context.Background(), dot.UID)
	if err != nil || len(rows) != 1 || !strings.Contains(string(rows[0].Data), "␀") {
		t.Fatalf("the outbox holds %v (%v), want the message queued", rows, err)
	}
}

func TestQueryParametersThatCannotBeRead(t *testing.T) {
	e := newEnv(t)
	path := wire.DotEventsPath("team-a", "helper")
	for _, q := range []string{"task=a%00b", "tools=%ff", "types=%zz", "%00=1"} {
		got, body := e.call(t, "viewer", http.MethodGet, path+"?"+q, "", "")
		if got.Status != http.StatusBadRequest || got.Code != wire.CodeInvalidRequest {
			t.Errorf("GET events?%s answered %+v %s, want 400 invalid_request", q, got, body)
		}
	}
}

// FuzzIngestText: whatever text a guest's event holds, ingestion stores it
// (as it is, escaped, or refused) and the cursor moves past it.
func FuzzIngestText(f *testing.F) {
	for _, s := range []string{"plain", "nul \x00", "\xff\xfe", `\u0000`, `\ud800`, "\\", "é😀"} {
		f.Add(s)
	}
	e := newEnv(f)
	dot := e.dots["team-a/helper"]
	path := wire.EventsPath("host-1", "team-a", "helper")
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, text string) {
		// The text as JSON string content, bytes kept raw.
		quoted := `"` + strings.NewReplacer(`"`, `\"`, "\n", `\n`).Replace(text) + `"`
		n := seq.Add(1)
		got, data := e.call(t, "agent-1", http.MethodPost, path, "application/json", rawBatch(dot.UID, n, `{"text":`+quoted+`}`))
		if got.Status == http.StatusBadRequest {
			return // not JSON at all: the batch is refused as a whole and nothing is lost
		}
		var ing wire.Ingested
		if got.Status != http.StatusOK || json.Unmarshal(data, &ing) != nil || ing.Cursor != n {
			t.Fatalf("ingesting %q answered %+v %s, want 200 with the cursor at %d", text, got, data, n)
		}
	})
}

// FuzzPostMessageText: a person's message is taken or refused as a request
// (400), never a failure of the server.
func FuzzPostMessageText(f *testing.F) {
	for _, s := range []string{"hello", "nul \x00", "\xff", `\u0000`} {
		f.Add(s)
	}
	e := newEnv(f)
	path := wire.MessagesPath("team-a", "helper")
	f.Fuzz(func(t *testing.T, text string) {
		body, _ := json.Marshal(map[string]string{"text": text})
		got, data := e.call(t, "editor", http.MethodPost, path, "application/json", string(body))
		if got.Status >= 500 {
			t.Fatalf("POST messages with %q answered %+v %s", text, got, data)
		}
		if got.Status >= 300 && strings.TrimSpace(pgtext.String(text)) != "" && got.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("POST messages with %q was refused: %+v %s", text, got, data)
		}
	})
}
