package daemon

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func quietLog() *slog.Logger {
	if os.Getenv("ENGINE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func TestChatTurnAnswersOnceAndStatesFollow(t *testing.T) {
	h := startEngine(t, t.TempDir(), nil, nil)
	s := openStream(t, h.c, 0, false)
	// No work before both config and key (ref 8.8).
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "hello"})
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "hello"}) // redelivery: ignored
	if n := len(h.or.Requests()); n != 0 {
		t.Fatalf("%d model requests before config and key, want 0", n)
	}
	h.configure(testConfig(nil))
	evs := s.waitFor(t, "the answer and IDLE", func(evs []protocol.OutboundEvent) bool {
		st := ofType(evs, protocol.EventAgentState)
		return hasType(protocol.EventMessageAssistant)(evs) && len(st) > 0 && string(st[len(st)-1].Data) == `{"state":"IDLE"}`
	})
	answers := ofType(evs, protocol.EventMessageAssistant)
	if len(answers) != 1 {
		t.Fatalf("%d answers, want 1: %s", len(answers), describe(evs))
	}
	got := decode[protocol.MessageAssistant](t, answers[0])
	reply, spent := "m1", 0.001
	want := protocol.MessageAssistant{Text: "echo: hello", InReplyTo: &reply, SpentUSD: &spent}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("message.assistant (-want +got):\n%s", diff)
	}
	var types []string
	for _, e := range evs {
		if e.Type == protocol.EventAgentState {
			types = append(types, string(decode[protocol.AgentStateChanged](t, e).State))
		} else {
			types = append(types, e.Type)
		}
	}
	wantTypes := []string{"agent.started", "IDLE", "THINKING", "message.assistant", "DONE", "IDLE"}
	if diff := cmp.Diff(wantTypes, types); diff != "" {
		t.Errorf("event order (-want +got):\n%s", diff)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Errorf("event %d has seq %d, want %d", i, e.Seq, i+1)
		}
		if _, err := protocol.ParseOutbound(e); err != nil {
			t.Errorf("event %d does not parse as the host parses it: %v", e.Seq, err)
		}
	}
	reqs := h.or.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.ToolChoice != "auto" || !r.Stream || r.MaxTokens <= 0 || r.Provider == nil || len(r.Provider.Only) != 1 {
		t.Errorf("request = tool_choice %q stream %v max_tokens %d provider %+v; want auto, streamed, max_tokens from the window, provider.only",
			r.ToolChoice, r.Stream, r.MaxTokens, r.Provider)
	}
	// The conversation file of the day is written after the turn.
	var chatFile string
	for p := range h.files.files {
		if strings.HasPrefix(p, "/home/dot/conversations/chat/") {
			chatFile = h.files.Get(p)
		}
	}
	if !strings.Contains(chatFile, "hello") || !strings.Contains(chatFile, "echo: hello") {
		t.Errorf("conversation file = %q, want the message and the answer", chatFile)
	}
}

func TestToolCallsAllowDenyAndOffered(t *testing.T) {
	tools := &fakeTools{}
	h := startEngine(t, t.TempDir(), nil, tools)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(map[string]protocol.Decision{"computer.exec": protocol.Deny}))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt"} ; fake_exec {"cmd":"rm -rf /"}`})
	evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	called := ofType(evs, protocol.EventToolCalled)
	// fake_exec is not offered (computer.exec is deny): the model's call of it
	// never reaches the gate, runs nothing and reports nothing.
	if len(called) != 1 {
		t.Fatalf("%d tool.called, want 1: %s", len(called), describe(evs))
	}
	first := decode[protocol.ToolCalled](t, called[0])
	target := "a.txt"
	if diff := cmp.Diff(protocol.ToolCalled{Tool: "fake_write", Permission: "files.write", Decision: protocol.Allow, OK: true,
		DurationMS: first.DurationMS, Target: &target}, first); diff != "" {
		t.Errorf("allowed call (-want +got):\n%s", diff)
	}
	if got := tools.Runs(); len(got) != 1 || !strings.HasPrefix(got[0], "fake_write") {
		t.Errorf("runs = %q, want only fake_write", got)
	}
	for _, r := range h.or.Requests() {
		for _, tl := range r.Tools {
			if tl.Function.Name == "fake_exec" {
				t.Errorf("fake_exec offered while computer.exec is deny")
			}
		}
	}
}
