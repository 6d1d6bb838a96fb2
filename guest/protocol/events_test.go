package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/outbound-events.jsonl from the shapes")

const wireShapesFile = "testdata/outbound-events.jsonl"

// wireShapes is one event of every outbound type with each set of its
// optional keys (ref 5.4's drift check): the host's tests read the same
// file back with their parser.
func wireShapes() []OutboundEvent {
	var datas []struct {
		typ  string
		data any
	}
	add := func(typ string, data any) {
		datas = append(datas, struct {
			typ  string
			data any
		}{typ, data})
	}
	s := func(v string) *string { return &v }
	f := func(v float64) *float64 { return &v }
	yes := true
	add(EventAgentStarted, AgentStarted{})
	for _, st := range AgentStates {
		if st != StatePlanning { // the engine never reports it
			add(EventAgentState, AgentStateChanged{State: st})
		}
	}
	for mask := 0; mask < 4; mask++ {
		m := MessageAssistant{Text: "Done: the fares are in fares.csv."}
		if mask&1 != 0 {
			m.InReplyTo = s("msg-1")
		}
		if mask&2 != 0 {
			m.SpentUSD = f(0.01234567)
		}
		add(EventMessageAssistant, m)
	}
	add(EventTaskStarted, TaskStarted{TaskID: "task-1"})
	add(EventTaskProgress, TaskProgress{TaskID: "task-1", Text: "Checking the fares page."})
	add(EventTaskProgress, TaskProgress{TaskID: "task-1", Text: "Checking the fares page.", SpentUSD: f(0.002)})
	add(EventTaskCompleted, TaskCompleted{TaskID: "task-1", Summary: "Three fares under 100 EUR."})
	add(EventTaskCompleted, TaskCompleted{TaskID: "task-1", Summary: "Three fares under 100 EUR.", SpentUSD: f(0.05)})
	add(EventTaskFailed, TaskFailed{TaskID: "task-1", Error: "stopped: the task was interrupted 3 times"})
	add(EventTaskFailed, TaskFailed{TaskID: "task-1", Error: "stopped: the task reached limits.max_cost_per_task_usd (spent 1.0423 USD of 1.00)", SpentUSD: f(1.0423)})
	args := json.RawMessage(`{"command":"rm -rf build","timeout":60}`)
	add(EventApprovalRequested, ApprovalRequested{ApprovalID: "ap-1", Tool: "exec", Permission: "computer.exec", Arguments: args, Reason: "The Dot's configuration asks before it may run commands (computer.exec)."})
	add(EventApprovalRequested, ApprovalRequested{ApprovalID: "ap-2", TaskID: s("task-1"), Tool: "exec", Permission: "computer.exec", Arguments: args, Reason: "The Dot's configuration asks before it may run commands (computer.exec)."})
	for mask := 0; mask < 16; mask++ {
		tc := ToolCalled{Tool: "exec", Permission: "computer.exec", Decision: Allow, OK: true, DurationMS: 1234}
		if mask&1 != 0 {
			tc.TaskID = s("task-1")
		}
		if mask&2 != 0 {
			tc.Target = s("make test")
		}
		if mask&4 != 0 {
			tc.TTY = &yes
		}
		if mask&8 != 0 {
			tc.Interrupted, tc.OK, tc.DurationMS = &yes, false, 0
		}
		add(EventToolCalled, tc)
	}
	add(EventToolCalled, ToolCalled{Tool: "write_file", Permission: "files.write", Decision: Deny})
	add(EventToolCalled, ToolCalled{Tool: "write_file", Permission: "files.write", Decision: Ask, OK: true, DurationMS: 12, Target: s("notes.md")})
	for _, typ := range []string{EventBrowserIdentityCreated, EventBrowserIdentityDeleted, EventBrowserIdentityLaunch, EventBrowserIdentityClosed} {
		add(typ, BrowserIdentityEvent{IdentityID: "id-1", Name: "work"})
	}
	next := int64(1796036400000)
	add(EventAutomationNextRun, AutomationNextRun{NextRunAtMS: &next})
	add(EventAutomationNextRun, AutomationNextRun{})
	add(EventMemoryUpdated, MemoryUpdated{Conversations: 2, Changed: true})
	add(EventMemoryUpdated, MemoryUpdated{Conversations: 1, Changed: false, SpentUSD: f(0.025)})
	add(EventMCPServerAdded, MCPServerAdded{Arguments: json.RawMessage(`{"name":"time","command":"uvx","args":["mcp-server-time"],"reason":"to tell the time"}`)})
	add(EventOutboxReset, OutboxReset{Cursor: 120, LastSeq: 3})
	add(EventBrowserIdentityClosed, BrowserIdentityEvent{IdentityID: "id-1", Name: "work", Reason: s(BrowserClosedCrashed)})
	n := func(v int64) *int64 { return &v }
	add(EventMessageAssistant, MessageAssistant{Text: "Done.", InReplyTo: s("msg-1"), SpentUSD: f(0.01234567), ReasoningTokens: n(812)})
	add(EventTaskProgress, TaskProgress{TaskID: "task-1", Text: "Checking the fares page.", SpentUSD: f(0.002), ReasoningTokens: n(64)})
	add(EventTaskCompleted, TaskCompleted{TaskID: "task-1", Summary: "Three fares under 100 EUR.", SpentUSD: f(0.05), ReasoningTokens: n(2048)})
	add(EventTaskFailed, TaskFailed{TaskID: "task-1", Error: "stopped: the task was interrupted 3 times", SpentUSD: f(0.5), ReasoningTokens: n(4096)})
	add(EventMemoryUpdated, MemoryUpdated{Conversations: 1, Changed: true, SpentUSD: f(0.025), ReasoningTokens: n(128)})
	out := make([]OutboundEvent, 0, len(datas))
	for i, d := range datas {
		raw, err := json.Marshal(d.data)
		if err != nil {
			panic(err)
		}
		out = append(out, OutboundEvent{Seq: int64(i + 1), ID: fmt.Sprintf("ev-%03d", i+1), Type: d.typ,
			TS: "2026-11-30T12:00:00.000Z", Data: raw})
	}
	return out
}

func TestWireShapesFileIsCurrent(t *testing.T) {
	var b bytes.Buffer
	for _, ev := range wireShapes() {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if *update {
		if err := os.WriteFile(wireShapesFile, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(wireShapesFile)
	if err != nil {
		t.Fatalf("read %s (write it with: go test ./guest/protocol/ -run WireShapes -args -update): %v", wireShapesFile, err)
	}
	if diff := cmp.Diff(b.String(), string(got)); diff != "" {
		t.Errorf("%s is not what the shapes write; rewrite it with -args -update (-want +got):\n%s", wireShapesFile, diff)
	}
	seen := map[string]bool{}
	for _, ev := range wireShapes() {
		seen[ev.Type] = true
	}
	for _, typ := range OutboundTypes {
		if !seen[typ] {
			t.Errorf("outbound type %s has no line in %s", typ, wireShapesFile)
		}
	}
}

// TestWireShapesRoundTrip reads the file back as the host does: every line
// parses, and its data encodes back unchanged.
func TestWireShapesRoundTrip(t *testing.T) {
	f, err := os.Open(filepath.FromSlash(wireShapesFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		var ev OutboundEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		parsed, err := ParseOutbound(ev)
		if err != nil {
			t.Errorf("line %d (%s) refused: %v", n, ev.Type, err)
			continue
		}
		again, err := json.Marshal(parsed)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(compact(t, ev.Data), string(again)); diff != "" {
			t.Errorf("line %d (%s) does not round-trip (-file +parsed):\n%s", n, ev.Type, diff)
		}
	}
	if n == 0 {
		t.Fatal("the file is empty")
	}
}

func compact(t *testing.T, raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestParseOutboundRefuses(t *testing.T) {
	ev := func(typ, data string) OutboundEvent {
		return OutboundEvent{Seq: 1, ID: "e", Type: typ, TS: "t", Data: json.RawMessage(data)}
	}
	long := strings.Repeat("x", ToolTargetMax+1)
	tests := map[string]struct {
		ev   OutboundEvent
		want string
	}{
		"unknown type":     {ev("agent.exploded", `{}`), "unknown type"},
		"missing key":      {ev(EventTaskStarted, `{}`), `lacks "task_id"`},
		"not an object":    {ev(EventAgentStarted, `[]`), "not a JSON object"},
		"bad state":        {ev(EventAgentState, `{"state":"SLEEPING"}`), "unknown state"},
		"bad decision":     {ev(EventToolCalled, `{"tool":"exec","permission":"computer.exec","decision":"maybe","ok":true,"duration_ms":1}`), "unknown decision"},
		"long target":      {ev(EventToolCalled, `{"tool":"exec","permission":"computer.exec","decision":"allow","ok":true,"duration_ms":1,"target":"`+long+`"}`), "longer than 160"},
		"two-line target":  {ev(EventToolCalled, `{"tool":"exec","permission":"computer.exec","decision":"allow","ok":true,"duration_ms":1,"target":"a\nb"}`), "more than one line"},
		"null next run ok": {ev(EventAutomationNextRun, `{"next_run_at_ms":null}`), ""},
		"crashed ok":       {ev(EventBrowserIdentityClosed, `{"identity_id":"i","name":"n","reason":"crashed"}`), ""},
		"unknown reason":   {ev(EventBrowserIdentityClosed, `{"identity_id":"i","name":"n","reason":"bored"}`), "unknown reason"},
		"negative tokens":  {ev(EventTaskCompleted, `{"task_id":"t","summary":"s","reasoning_tokens":-1}`), "below zero"},
		"absent next run":  {ev(EventAutomationNextRun, `{}`), `lacks "next_run_at_ms"`},
		"seq zero":         {OutboundEvent{Seq: 0, ID: "e", Type: EventAgentStarted, TS: "t", Data: json.RawMessage(`{}`)}, "seq 0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseOutbound(tc.ev)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("ParseOutbound = %v, want it accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("ParseOutbound = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestParseInbound(t *testing.T) {
	tests := map[string]struct {
		ev   InboundEvent
		want string
	}{
		"user message":       {InboundEvent{ID: "1", Type: InboundUserMessage, Data: json.RawMessage(`{"text":"hi"}`)}, ""},
		"empty text":         {InboundEvent{ID: "1", Type: InboundUserMessage, Data: json.RawMessage(`{"text":" "}`)}, "no text"},
		"task":               {InboundEvent{ID: "1", Type: InboundTaskCreated, Data: json.RawMessage(`{"task_id":"t","description":"d","priority":2}`)}, ""},
		"task without id":    {InboundEvent{ID: "1", Type: InboundTaskCreated, Data: json.RawMessage(`{"description":"d"}`)}, "needs task_id"},
		"approval":           {InboundEvent{ID: "1", Type: InboundApprovalReceived, Data: json.RawMessage(`{"approval_id":"a","decision":"approve","note":"ok"}`)}, ""},
		"approval maybe":     {InboundEvent{ID: "1", Type: InboundApprovalReceived, Data: json.RawMessage(`{"approval_id":"a","decision":"maybe"}`)}, "neither approve nor reject"},
		"cancel":             {InboundEvent{ID: "1", Type: InboundSystemEvent, Data: json.RawMessage(`{"name":"task.cancelled","data":{"task_id":"t"}}`)}, ""},
		"cancel without id":  {InboundEvent{ID: "1", Type: InboundSystemEvent, Data: json.RawMessage(`{"name":"task.cancelled","data":{}}`)}, "needs data.task_id"},
		"delegation":         {InboundEvent{ID: "1", Type: InboundSystemEvent, Data: json.RawMessage(`{"name":"delegation","data":{"dot":"helper","outcome":"COMPLETED","text":"done"}}`)}, ""},
		"delegation no text": {InboundEvent{ID: "1", Type: InboundSystemEvent, Data: json.RawMessage(`{"name":"delegation","data":{"dot":"helper","outcome":"COMPLETED"}}`)}, "needs data.dot and data.text"},
		"no id":              {InboundEvent{Type: InboundUserMessage, Data: json.RawMessage(`{"text":"hi"}`)}, "no id"},
		"unknown":            {InboundEvent{ID: "1", Type: "user.shout", Data: json.RawMessage(`{}`)}, "unknown inbound event type"},
		"data not an object": {InboundEvent{ID: "1", Type: InboundUserMessage, Data: json.RawMessage(`"hi"`)}, "not a JSON object"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseInbound(tc.ev)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("ParseInbound = %v, want it accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("ParseInbound = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
