package eventtext

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// Every type the log can hold has its words: a type added to the host's or
// the guest's list fails here until it is worded.
func TestEveryTypeIsWorded(t *testing.T) {
	for _, typ := range slices.Concat(wire.HostEventTypes, protocol.OutboundTypes) {
		if _, ok := describers[typ]; !ok {
			t.Errorf("event type %s has no words in eventtext", typ)
		}
	}
}

func TestLine(t *testing.T) {
	ev := func(typ, data string) wire.Event { return wire.Event{Type: typ, Data: json.RawMessage(data)} }
	tests := []struct {
		e    wire.Event
		want string
	}{
		{ev(protocol.EventToolCalled, `{"tool":"exec","target":"make test","ok":false,"decision":"allow","duration_ms":1500,"task_id":"4f2a-77"}`),
			"ran exec make test (failed) in 1.5s [task 4f2a]"},
		{ev(protocol.EventToolCalled, `{"tool":"exec","ok":true,"decision":"deny","duration_ms":0}`), "ran exec (denied) in 0s"},
		{ev(protocol.EventApprovalRequested, `{"approval_id":"a","tool":"exec","permission":"computer.exec","arguments":{"command":"rm -rf x"},"reason":"clean up"}`),
			`asks to run exec {"command":"rm -rf x"} (computer.exec): clean up`},
		{ev(wire.EventApprovalResolved, `{"approval":"helper-1a","decision":"approve","always":true}`), "approval helper-1a: approve, and allowed from now on"},
		{ev(protocol.EventTaskCompleted, `{"task_id":"9b1c-2","summary":"the tests\npassed","spent_usd":0.0042}`), "task 9b1c completed: the tests passed ($0.0042)"},
		{ev(protocol.EventTaskCompleted, `{"task_id":"9b1c-2","summary":"done","spent_usd":0.0042,"reasoning_tokens":812}`), "task 9b1c completed: done ($0.0042, 812 reasoning tokens)"},
		{ev(protocol.EventMessageAssistant, `{"text":"hi","reasoning_tokens":5}`), "dot: hi (5 reasoning tokens)"},
		{ev(wire.EventMessageUser, `{"text":"hello"}`), "you: hello"},
		{ev(wire.EventMessageUser, `{"text":"hello","origin":{"channel":"telegram","binding_id":"b","chat_id":"42","external_id":"7:1"}}`), "you, via Telegram: hello"},
		{ev(wire.EventChannelPeerPaired, `{"kind":"telegram","peer_id":"42","label":"Ada"}`), "Ada paired through Telegram and may talk to the Dot there"},
		{ev(protocol.EventBrowserIdentityClosed, `{"identity_id":"i","name":"work"}`), "closed the browser identity work"},
		{ev(protocol.EventBrowserIdentityLaunch, `{"identity_id":"i","name":"work"}`), "opened the browser identity work"},
		{ev(protocol.EventBrowserIdentityLaunch, `{"identity_id":"i","name":"work","timezone":"Europe/Amsterdam","locale":"nl-NL"}`), "opened the browser identity work (placed at its exit: Europe/Amsterdam, nl-NL)"},
		{ev(protocol.EventBrowserIdentityClosed, `{"identity_id":"i","name":"work","reason":"crashed"}`), "the browser of the identity work crashed; it opens again only when launched"},
		{ev(wire.EventComputerState, `{"state":"STOPPED","stop_reason":"idle"}`), "the computer is STOPPED (idle)"},
		{ev(protocol.EventAgentState, `{"state":"THINKING"}`), "the agent is THINKING"},
		{ev(protocol.EventMessageAssistant, `{"text":"hi"}`), "dot: hi"},
		{ev(protocol.EventAgentState, `{"state":`), "agent.state (its data does not read: unexpected end of JSON input)"},
		{ev("something.new", `{"a":1}`), `something.new {"a":1}`},
	}
	for _, tc := range tests {
		if got := Line(tc.e); got != tc.want {
			t.Errorf("Line(%s %s) = %q; want %q", tc.e.Type, tc.e.Data, got, tc.want)
		}
	}
}

// TestGuestShapesAreWorded: every event the guest writes (its generated
// shapes, guest/protocol/testdata/outbound-events.jsonl) reads into the
// words of its type, so a key the guest renames cannot leave the Activity
// page with data that does not read (ref 5.4).
func TestGuestShapesAreWorded(t *testing.T) {
	raw, err := os.ReadFile(filepath.FromSlash("../../guest/protocol/testdata/outbound-events.jsonl"))
	if err != nil {
		t.Fatalf("read the guest's shapes: %v", err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ev protocol.OutboundEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d does not read: %v", i+1, err)
		}
		got := Line(wire.Event{Type: ev.Type, Data: ev.Data})
		if strings.Contains(got, "does not read") || got == "" {
			t.Errorf("line %d (%s) = %q; want the words of its type", i+1, ev.Type, got)
		}
	}
}

// The engine's HTML-safe escapes of <, > and & are shown as the characters,
// and nothing else of the arguments changes.
func TestArgumentsText(t *testing.T) {
	for raw, want := range map[string]string{
		`{"command":"echo hostile \u003e\u003e /home/dot/x \u0026\u0026 ls \u003C a"}`: `{"command":"echo hostile >> /home/dot/x && ls < a"}`,
		`{"b":1,"a":"\\u003e is not an escape here","c":"\n\u00e9"}`:                   `{"b":1,"a":"\\u003e is not an escape here","c":"\n\u00e9"}`,
		`{"path":"notes.md"}`: `{"path":"notes.md"}`,
		`not json \u003e`:     `not json >`,
		`trailing \`:          `trailing \`,
	} {
		if got := ArgumentsText(json.RawMessage(raw)); got != want {
			t.Errorf("ArgumentsText(%s) = %s; want %s", raw, got, want)
		}
	}
}
