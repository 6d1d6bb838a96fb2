package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	// The conversation file of the day is written after the turn, once its
	// end (the events just read) committed.
	chatFile := waitForFile(t, h, "/home/dot/conversations/chat/", "echo: hello")
	if !strings.Contains(chatFile, "hello") || !strings.Contains(chatFile, "echo: hello") {
		t.Errorf("conversation file = %q, want the message and the answer", chatFile)
	}
}

// TestBackToBackTurnsEachEndDone: a message sent the moment the answer
// before it is seen starts the next turn while the last one is ending; every
// turn still ends with DONE then IDLE before the next THINKING (ref 8.1). The
// end of a turn once left a window, after the turn let go of the chat and
// before its state was computed, in which the next turn could start: that
// turn's THINKING then followed the last one's with no DONE between them.
func TestBackToBackTurnsEachEndDone(t *testing.T) {
	h := startEngine(t, t.TempDir(), nil, nil)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	const turns = 30
	for i := 0; i < turns; i++ {
		h.send(fmt.Sprintf("m%d", i), protocol.InboundUserMessage, protocol.UserMessage{Text: "hi"})
		s.waitFor(t, "the answer", func(evs []protocol.OutboundEvent) bool {
			return countType(evs, protocol.EventMessageAssistant) == i+1
		})
	}
	evs := s.waitFor(t, "the last IDLE", func(evs []protocol.OutboundEvent) bool {
		st := ofType(evs, protocol.EventAgentState)
		return countType(evs, protocol.EventMessageAssistant) == turns && len(st) > 0 &&
			string(st[len(st)-1].Data) == `{"state":"IDLE"}`
	})
	var seq []string
	for _, e := range evs {
		switch e.Type {
		case protocol.EventAgentState:
			seq = append(seq, string(decode[protocol.AgentStateChanged](t, e).State))
		case protocol.EventMessageAssistant:
			seq = append(seq, "answer")
		}
	}
	want := []string{"IDLE"}
	for i := 0; i < turns; i++ {
		want = append(want, "THINKING", "answer", "DONE", "IDLE")
	}
	if diff := cmp.Diff(want, seq); diff != "" {
		t.Errorf("states and answers (-want +got):\n%s", diff)
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

func TestConfigPushedBetweenCallsAppliesToTheSecond(t *testing.T) {
	tools := &fakeTools{}
	h := startEngine(t, t.TempDir(), nil, tools)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	pushed := false
	tools.during = func(name string) {
		if name == "fake_write" && !pushed {
			pushed = true
			if code, body := call(t, h.c, "PUT", "/config", testConfig(map[string]protocol.Decision{"computer.exec": protocol.Deny})); code != 204 {
				t.Errorf("PUT /config during the call = %d %s", code, body)
			}
		}
	}
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt"} ; fake_exec {"cmd":"ls"}`})
	evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	called := ofType(evs, protocol.EventToolCalled)
	if len(called) != 2 {
		t.Fatalf("%d tool.called, want 2: %s", len(called), describe(evs))
	}
	second := decode[protocol.ToolCalled](t, called[1])
	if diff := cmp.Diff(protocol.ToolCalled{Tool: "fake_exec", Permission: "computer.exec", Decision: protocol.Deny}, second); diff != "" {
		t.Errorf("second call (-want +got):\n%s", diff)
	}
	if got := tools.Runs(); len(got) != 1 {
		t.Errorf("runs = %q, want only the first call", got)
	}
	// The model was told the policy denied it.
	reqs := h.or.Requests()
	last := reqs[len(reqs)-1].Messages
	if got := last[len(last)-1].text(); got != "The Dot's policy denied this call." {
		t.Errorf("result the model read = %q", got)
	}
	// The next turn does not offer the denied tool.
	h.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: "and now?"})
	s.waitFor(t, "the second answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) == 2 })
	reqs = h.or.Requests()
	for _, tl := range reqs[len(reqs)-1].Tools {
		if tl.Function.Name == "fake_exec" {
			t.Errorf("fake_exec is offered after computer.exec became deny")
		}
	}
}

func TestApprovalParksThenRunsTheApprovedCallOnce(t *testing.T) {
	tools := &fakeTools{}
	h := startEngine(t, t.TempDir(), nil, tools)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(map[string]protocol.Decision{"files.write": protocol.Ask}))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt","text":"x"} ; fake_exec {"cmd":"ls"}`})
	evs := s.waitFor(t, "WAITING_APPROVAL", func(evs []protocol.OutboundEvent) bool {
		st := ofType(evs, protocol.EventAgentState)
		return len(st) > 0 && decode[protocol.AgentStateChanged](t, st[len(st)-1]).State == protocol.StateWaitingApproval
	})
	reqd := ofType(evs, protocol.EventApprovalRequested)
	if len(reqd) != 1 {
		t.Fatalf("%d approval.requested, want 1", len(reqd))
	}
	ar := decode[protocol.ApprovalRequested](t, reqd[0])
	if ar.Tool != "fake_write" || ar.Permission != "files.write" || string(ar.Arguments) != `{"path":"a.txt","text":"x"}` || ar.Reason == "" {
		t.Errorf("approval.requested = %+v", ar)
	}
	if n := countType(evs, protocol.EventToolCalled); n != 0 {
		t.Errorf("%d tool.called while parked (the later call is skipped and reports nothing), want 0", n)
	}
	if n := countType(evs, protocol.EventMessageAssistant); n != 0 {
		t.Errorf("the chat answered while its call waits")
	}
	if got := tools.Runs(); len(got) != 0 {
		t.Errorf("runs while parked = %q, want none", got)
	}
	_, body := call(t, h.c, "GET", "/state", nil)
	var st protocol.State
	json.Unmarshal(body, &st)
	if st.PendingApproval == nil || *st.PendingApproval != ar.ApprovalID || st.State != protocol.StateWaitingApproval {
		t.Errorf("GET /state = %s, want the pending approval %s", body, ar.ApprovalID)
	}
	h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalApprove})
	h.send("a1b", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalReject}) // decided already: ignored
	evs = s.waitFor(t, "the answer after the approval", hasType(protocol.EventMessageAssistant))
	called := ofType(evs, protocol.EventToolCalled)
	if len(called) != 1 {
		t.Fatalf("%d tool.called, want 1: %s", len(called), describe(evs))
	}
	tc := decode[protocol.ToolCalled](t, called[0])
	if tc.Decision != protocol.Ask || !tc.OK || tc.Tool != "fake_write" {
		t.Errorf("tool.called = %+v, want the approved call with decision ask", tc)
	}
	if got := tools.Runs(); len(got) != 1 {
		t.Errorf("runs = %q, want the approved call once", got)
	}
	ans := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0])
	if ans.InReplyTo == nil || *ans.InReplyTo != "m1" || ans.SpentUSD == nil || *ans.SpentUSD != 0.003 {
		t.Errorf("answer = %+v, want in reply to m1 with the spend before and after the approval (0.003)", ans)
	}
	// The same call made again later asks again: the approval was used once.
	h.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt","text":"x"}`})
	s.waitFor(t, "a second approval", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventApprovalRequested) == 2 })
	if got := tools.Runs(); len(got) != 1 {
		t.Errorf("runs = %q, want still one", got)
	}
}

func TestApprovalWithChangedArgumentsAsksAgain(t *testing.T) {
	tools := &fakeTools{}
	h := startEngine(t, t.TempDir(), nil, tools)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(map[string]protocol.Decision{"files.write": protocol.Ask}))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `CHANGE run fake_write {"path":"a.txt"}`})
	evs := s.waitFor(t, "approval.requested", hasType(protocol.EventApprovalRequested))
	ar := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[0])
	h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalApprove})
	evs = s.waitFor(t, "a second approval.requested", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventApprovalRequested) == 2
	})
	second := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[1])
	if string(second.Arguments) != `{"path":"other-a.txt"}` || second.ApprovalID == ar.ApprovalID {
		t.Errorf("second approval = %+v, want a new one for the changed arguments", second)
	}
	if got := tools.Runs(); len(got) != 0 {
		t.Errorf("runs = %q, want none: the changed call was not approved", got)
	}
	if n := countType(evs, protocol.EventToolCalled); n != 0 {
		t.Errorf("%d tool.called, want 0", n)
	}
}

func TestApprovalRejectedTellsTheModel(t *testing.T) {
	tools := &fakeTools{}
	h := startEngine(t, t.TempDir(), nil, tools)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(map[string]protocol.Decision{"files.write": protocol.Ask}))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt"}`})
	evs := s.waitFor(t, "approval.requested", hasType(protocol.EventApprovalRequested))
	ar := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[0])
	note := "not that file"
	h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalReject, Note: &note})
	evs = s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	if got := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0]).Text; got != "understood, I did not do it" {
		t.Errorf("answer = %q", got)
	}
	reqs := h.or.Requests()
	msgs := reqs[len(reqs)-1].Messages
	if told := msgs[len(msgs)-1].text(); !strings.Contains(told, "rejected") || !strings.Contains(told, note) {
		t.Errorf("the model was told %q, want the rejection with the note", told)
	}
	if len(tools.Runs()) != 0 {
		t.Errorf("a rejected call ran")
	}
}

func TestTasksRunByPriorityThenArrivalAndComplete(t *testing.T) {
	h := startEngine(t, t.TempDir(), nil, nil)
	s := openStream(t, h.c, 0, false)
	h.send("t1", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "low", Description: `run fake_write {"path":"low.txt"} say writing the low one`, Priority: 1})
	h.send("t2", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "high", Description: `run fake_write {"path":"high.txt"}`, Priority: 5})
	h.send("t3", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "high2", Description: "plain", Priority: 5})
	h.configure(testConfig(nil))
	evs := s.waitFor(t, "three completions", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventTaskCompleted) == 3
	})
	var order []string
	for _, e := range ofType(evs, protocol.EventTaskStarted) {
		order = append(order, decode[protocol.TaskStarted](t, e).TaskID)
	}
	if diff := cmp.Diff([]string{"high", "high2", "low"}, order); diff != "" {
		t.Errorf("start order (-want +got):\n%s", diff)
	}
	prog := ofType(evs, protocol.EventTaskProgress)
	if len(prog) != 1 {
		t.Fatalf("%d task.progress, want 1 (the text beside the calls of low)", len(prog))
	}
	p := decode[protocol.TaskProgress](t, prog[0])
	if p.TaskID != "low" || p.Text != "writing the low one" || p.SpentUSD == nil {
		t.Errorf("task.progress = %+v", p)
	}
	for _, e := range ofType(evs, protocol.EventTaskCompleted) {
		c := decode[protocol.TaskCompleted](t, e)
		if c.SpentUSD == nil || *c.SpentUSD <= 0 || c.Summary == "" {
			t.Errorf("task.completed = %+v, want a summary and the spend", c)
		}
	}
	for _, e := range ofType(evs, protocol.EventToolCalled) {
		if tc := decode[protocol.ToolCalled](t, e); tc.TaskID == nil {
			t.Errorf("tool.called of a task without task_id: %s", e.Data)
		}
	}
}

func TestTaskCancelledWhileItsToolRuns(t *testing.T) {
	tools := &fakeTools{hold: make(chan struct{})}
	h := startEngine(t, t.TempDir(), nil, tools)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	h.send("t1", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "long", Description: `run fake_exec {"cmd":"sleep 100"}`})
	s.waitFor(t, "EXECUTING", func(evs []protocol.OutboundEvent) bool {
		for _, e := range ofType(evs, protocol.EventAgentState) {
			if decode[protocol.AgentStateChanged](t, e).State == protocol.StateExecuting {
				return true
			}
		}
		return false
	})
	cancelData, _ := json.Marshal(protocol.TaskCancelled{TaskID: "long"})
	h.send("c1", protocol.InboundSystemEvent, protocol.SystemEvent{Name: protocol.SystemEventTaskCancelled, Data: cancelData})
	evs := s.waitFor(t, "the interrupted call", hasType(protocol.EventToolCalled))
	tc := decode[protocol.ToolCalled](t, ofType(evs, protocol.EventToolCalled)[0])
	if tc.Interrupted == nil || !*tc.Interrupted || tc.OK || tc.DurationMS != 0 {
		t.Errorf("tool.called = %+v, want interrupted, not ok, 0 ms", tc)
	}
	s.waitFor(t, "IDLE", func(evs []protocol.OutboundEvent) bool {
		st := ofType(evs, protocol.EventAgentState)
		return decode[protocol.AgentStateChanged](t, st[len(st)-1]).State == protocol.StateIdle
	})
	for _, e := range s.Events() {
		if e.Type == protocol.EventTaskCompleted || e.Type == protocol.EventTaskFailed {
			t.Errorf("a task event followed the cancel: %s %s", e.Type, e.Data)
		}
	}
}

func TestLimits(t *testing.T) {
	tests := map[string]struct {
		reason   string
		text     string
		cost     float64
		maxCost  float64
		maxSteps int
		want     string
	}{
		"no cost": {
			reason: "a response that reports no cost fails the task before anything is done on it",
			text:   `NOCOST run fake_write {"path":"a"}`, cost: 0.001, maxCost: 1, maxSteps: 10,
			want: "stopped: OpenRouter reported no cost for a request, so limits.max_cost_per_task_usd cannot be enforced",
		},
		"steps": {
			reason: "max_steps_per_task model requests, then the task fails",
			text:   "STEPS", cost: 0.001, maxCost: 1, maxSteps: 3,
			want: "stopped: the task reached limits.max_steps_per_task (3 steps)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tools := &fakeTools{}
			or := newFakeOpenRouter(t)
			or.cost = tc.cost
			h := startEngine(t, t.TempDir(), or, tools)
			s := openStream(t, h.c, 0, false)
			cfg := testConfig(nil)
			cfg.Limits = protocol.Limits{MaxStepsPerTask: tc.maxSteps, MaxCostPerTaskUSD: tc.maxCost}
			h.configure(cfg)
			h.send("t1", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "x", Description: tc.text})
			evs := s.waitFor(t, "task.failed", hasType(protocol.EventTaskFailed))
			got := decode[protocol.TaskFailed](t, ofType(evs, protocol.EventTaskFailed)[0])
			if got.Error != tc.want {
				t.Errorf("%s\ntask.failed error = %q\nwant %q", tc.reason, got.Error, tc.want)
			}
			if name == "no cost" && len(tools.Runs()) != 0 {
				t.Errorf("%s: the unpriced response's calls ran: %q", tc.reason, tools.Runs())
			}
			if name == "steps" && len(h.or.Requests()) != tc.maxSteps {
				t.Errorf("%s: %d requests, want %d", tc.reason, len(h.or.Requests()), tc.maxSteps)
			}
		})
	}
}

func TestModelFailuresAndCutAnswers(t *testing.T) {
	t.Run("429 then success", func(t *testing.T) {
		or := newFakeOpenRouter(t)
		or.status = []int{429, 503}
		h := startEngine(t, t.TempDir(), or, nil)
		s := openStream(t, h.c, 0, false)
		h.configure(testConfig(nil))
		h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "hi"})
		evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
		if got := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0]).Text; got != "echo: hi" {
			t.Errorf("answer = %q after retries", got)
		}
	})
	t.Run("stream cut on every attempt", func(t *testing.T) {
		or := newFakeOpenRouter(t)
		or.cutNext = 4
		h := startEngine(t, t.TempDir(), or, nil)
		s := openStream(t, h.c, 0, false)
		h.configure(testConfig(nil))
		h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "hi"})
		evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
		got := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0])
		if !strings.HasPrefix(got.Text, "I could not answer: the model request failed") || strings.Contains(got.Text, "sk-or-test") {
			t.Errorf("answer = %q, want the failure in words and never the key", got.Text)
		}
	})
	t.Run("finish_reason length", func(t *testing.T) {
		tools := &fakeTools{}
		h := startEngine(t, t.TempDir(), nil, tools)
		s := openStream(t, h.c, 0, false)
		h.configure(testConfig(nil))
		h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "LENGTH please"})
		evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
		if got := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0]).Text; got != "finished after the cut" {
			t.Errorf("answer = %q", got)
		}
		if len(tools.Runs()) != 0 {
			t.Errorf("a cut answer's tool call ran: %q", tools.Runs())
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		h := startEngine(t, t.TempDir(), nil, nil)
		s := openStream(t, h.c, 0, false)
		cfg := testConfig(nil)
		cfg.Model.ID = "unknown/model"
		h.configure(cfg)
		h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "hi"})
		evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
		if got := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0]).Text; got != "I could not answer: OpenRouter does not know the model unknown/model" {
			t.Errorf("answer = %q", got)
		}
	})
}

func TestStreamResumesAfterSeqAndLastEventID(t *testing.T) {
	h := startEngine(t, t.TempDir(), nil, nil)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "one"})
	all := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	for name, header := range map[string]bool{"after": false, "Last-Event-ID": true} {
		r := openStream(t, h.c, 2, header)
		got := r.waitFor(t, "the replay", func(evs []protocol.OutboundEvent) bool { return len(evs) >= len(all)-2 })
		if diff := cmp.Diff(all[2:], got[:len(all)-2]); diff != "" {
			t.Errorf("%s: replay after seq 2 (-want +got):\n%s", name, diff)
		}
		r.mu.Lock()
		if len(r.ids) == 0 || r.ids[0] != "3" {
			t.Errorf("%s: first SSE id = %v, want 3", name, r.ids)
		}
		r.mu.Unlock()
	}
	code, body := call(t, h.c, "GET", "/events/stream?after=x", nil)
	if code != 400 || !strings.Contains(string(body), `"invalid"`) {
		t.Errorf("after=x = %d %s, want 400 invalid", code, body)
	}
}

func TestRoutesAndErrorCodes(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "skills", "invisible-playwright"), 0o755)
	os.WriteFile(filepath.Join(dir, "skills", "invisible-playwright", "SKILL.md"),
		[]byte("---\nname: invisible-playwright\ndescription: How to use browser identities\n---\nSteps.\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "skills", "broken"), 0o755)
	os.WriteFile(filepath.Join(dir, "skills", "broken", "SKILL.md"), []byte("no frontmatter"), 0o644)
	h := startEngine(t, dir, nil, nil)
	h.files.Write(nil, "/home/dot/skills/fares/SKILL.md", []byte("---\nname: fares\ndescription: Watch fares\n---\n1. look\n"))

	tests := map[string]struct {
		method, path string
		body         any
		wantCode     int
		wantIn       string
	}{
		"health before config": {"GET", "/health", nil, 200, `"openrouter_configured":false`},
		"tools before config":  {"GET", "/tools", nil, 200, `"offered":false`},
		"state":                {"GET", "/state", nil, 200, `"state":"IDLE","current_task_id":null,"pending_approval":null`},
		"skills":               {"GET", "/skills", nil, 200, `"name":"fares","description":"Watch fares","source":"dot"`},
		"bad key":              {"POST", "/secrets", `{"openrouter_api_key":"has space"}`, 400, `"error":"invalid_secret"`},
		"bad config":           {"PUT", "/config", `{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{},"limits":{},"goal":"old"}`, 400, `"error":"invalid_config"`},
		"bad role":             {"PUT", "/config", `{"name":"x","model":{"provider":"openrouter","id":"m"},"models":{"fast":"m"},"permissions":{},"limits":{}}`, 400, `unknown model role \"fast\" (the roles are: summary)`},
		"bad event":            {"POST", "/events", `{"id":"e1","type":"nope","data":{}}`, 400, `"error":"invalid"`},
		"no route":             {"GET", "/no-such-route", nil, 404, `"error":"not_found"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, body := call(t, h.c, tc.method, tc.path, tc.body)
			if code != tc.wantCode || !strings.Contains(string(body), tc.wantIn) {
				t.Errorf("%s %s = %d %s\nwant %d with %s", tc.method, tc.path, code, body, tc.wantCode, tc.wantIn)
			}
			if strings.Contains(string(body), "has space") {
				t.Errorf("the answer echoes the secret: %s", body)
			}
		})
	}
	_, body := call(t, h.c, "GET", "/skills", nil)
	if strings.Contains(string(body), "broken") || !strings.Contains(string(body), `"source":"builtin"`) {
		t.Errorf("skills = %s, want the built-in one and not the broken one", body)
	}
	h.configure(testConfig(map[string]protocol.Decision{"computer.exec": protocol.Deny}))
	_, body = call(t, h.c, "GET", "/tools", nil)
	var tools protocol.Tools
	json.Unmarshal(body, &tools)
	offered := map[string]bool{}
	for _, tl := range tools.Tools {
		offered[tl.Name] = tl.Offered
	}
	if diff := cmp.Diff(map[string]bool{"fake_write": true, "fake_exec": false, "fake_auto": true}, offered); diff != "" {
		t.Errorf("GET /tools offered (-want +got):\n%s", diff)
	}
	// The same config again changes nothing.
	if code, _ := call(t, h.c, "PUT", "/config", testConfig(map[string]protocol.Decision{"computer.exec": protocol.Deny})); code != 204 {
		t.Errorf("same config again = %d", code)
	}
	_, body = call(t, h.c, "GET", "/health", nil)
	var health protocol.Health
	json.Unmarshal(body, &health)
	if health.Status != "ok" || !health.OpenRouterConfigured || len(health.Checks) == 0 {
		t.Errorf("health = %s", body)
	}
	if strings.Contains(string(body), "sk-or-test") {
		t.Errorf("health shows the key")
	}
}

func TestModelUserIsRefused(t *testing.T) {
	dir := t.TempDir()
	or := newFakeOpenRouter(t)
	me, err := userName()
	if err != nil {
		t.Skip(err)
	}
	cfg := Config{AgentSocket: filepath.Join(dir, "agent.sock"), AgentdSocket: filepath.Join(dir, "agentd.sock"),
		Workspace: "/home/dot/workspace", StateDir: filepath.Join(dir, "state"), ModelUser: me}
	ctx, cancel := contextWithCancel()
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Deps{Model: or.client(), Tools: &fakeTools{}, Files: newFakeFiles(), Ready: func() { close(ready) }, Log: quietLog()})
	}()
	<-ready
	code, body := call(t, unixClient(cfg.AgentSocket), "GET", "/health", nil)
	if code != http.StatusForbidden || !strings.Contains(string(body), "forbidden") {
		t.Errorf("a connection of the model's user = %d %s, want 403", code, body)
	}
	fi, err := os.Stat(cfg.AgentSocket)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode = %v (%v), want 0660", fi.Mode().Perm(), err)
	}
	cancel()
	<-done
	// A socket file left by a crash is removed at start; a second engine on
	// the same state refuses to start.
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o600)
	h := startEngine(t, dir, or, nil)
	cfg.ModelUser = "nobody"
	err = Run(context.Background(), cfg, Deps{Model: or.client(), Tools: &fakeTools{}, Files: newFakeFiles(), Log: quietLog()})
	if err == nil || !strings.Contains(err.Error(), "another engine owns") {
		t.Errorf("second engine on the same state = %v, want it refused", err)
	}
	_ = h
}

func TestOwedAnswerAndInjection(t *testing.T) {
	tools := &fakeTools{hold: make(chan struct{})}
	h := startEngine(t, t.TempDir(), nil, tools)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_exec {"cmd":"make"}`})
	s.waitFor(t, "EXECUTING", func(evs []protocol.OutboundEvent) bool {
		for _, e := range ofType(evs, protocol.EventAgentState) {
			if decode[protocol.AgentStateChanged](t, e).State == protocol.StateExecuting {
				return true
			}
		}
		return false
	})
	// A message accepted while the turn runs is injected into it.
	h.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: "also this"})
	close(tools.hold)
	evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	if n := countType(evs, protocol.EventMessageAssistant); n != 1 {
		t.Fatalf("%d answers, want 1 covering both messages", n)
	}
	ans := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0])
	if ans.InReplyTo == nil || *ans.InReplyTo != "m2" {
		t.Errorf("in_reply_to = %v, want the newest message m2", ans.InReplyTo)
	}
}

func userName() (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", err
	}
	return u.Username, nil
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// TestAutomationFiresIntoTheChat runs the real tool table: the model adds a
// one-time automation with the cron tool, it fires, and the chat answers it
// with a message.assistant without in_reply_to.
func TestAutomationFiresIntoTheChat(t *testing.T) {
	dir := t.TempDir()
	or := newFakeOpenRouter(t)
	cfg := Config{AgentSocket: filepath.Join(dir, "agent.sock"), AgentdSocket: filepath.Join(dir, "agentd.sock"),
		Workspace: "/home/dot/workspace", StateDir: filepath.Join(dir, "state"), ModelUser: "nobody", AgentdBin: "/bin/false"}
	ctx, cancel := contextWithCancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Deps{Model: or.client(), Files: newFakeFiles(), Ready: func() { close(ready) }, Log: quietLog()})
	}()
	defer func() { cancel(); <-done }()
	<-ready
	c := unixClient(cfg.AgentSocket)
	s := openStream(t, c, 0, false)
	rc := testConfig(map[string]protocol.Decision{"automations": protocol.Allow})
	call(t, c, "PUT", "/config", rc)
	call(t, c, "POST", "/secrets", protocol.SecretsRequest{OpenRouterAPIKey: "sk-or-test-key-123"})
	at := time.Now().Add(4 * time.Second).UTC().Format(time.RFC3339)
	text := `run cron {"action":"add","name":"ping","message":"say pong","at":"` + at + `"}`
	raw, _ := json.Marshal(protocol.UserMessage{Text: text})
	call(t, c, "POST", "/events", protocol.InboundEvent{ID: "m1", Type: protocol.InboundUserMessage, Data: raw})
	evs := s.waitFor(t, "two answers", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventMessageAssistant) == 2
	})
	tc := decode[protocol.ToolCalled](t, ofType(evs, protocol.EventToolCalled)[0])
	if tc.Tool != "cron" || !tc.OK || tc.Permission != "automations" || tc.Target == nil || *tc.Target != "add ping" {
		t.Errorf("tool.called = %s", ofType(evs, protocol.EventToolCalled)[0].Data)
	}
	if n := countType(evs, protocol.EventAutomationNextRun); n < 2 {
		t.Errorf("%d automation.next_run, want the run and then null: %s", n, describe(evs))
	}
	fired := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[1])
	if fired.InReplyTo != nil || !strings.Contains(fired.Text, `[Automation "ping" fired] say pong`) {
		t.Errorf("answer to the firing = %+v, want no in_reply_to and the firing's text", fired)
	}
}

// TestCompaction: a thread that outgrows the model's window has its old tool
// results cleared first, then is summarized by the summary model without
// tools; the next request carries the summary (ref 8.6).
func TestCompaction(t *testing.T) {
	or := newFakeOpenRouter(t)
	or.window = 40000 // budget: 40000 - 8000 = 32000 tokens
	tools := &fakeTools{}
	h := startEngine(t, t.TempDir(), or, tools)
	s := openStream(t, h.c, 0, false)
	cfg := testConfig(nil)
	cfg.Models = map[string]string{"summary": "fake/summary"}
	h.configure(cfg)
	big := strings.Repeat("lorem ipsum ", 4000) // ~48000 chars, ~12000 tokens
	for i := 0; i < 3; i++ {
		h.send(fmt.Sprintf("m%d", i), protocol.InboundUserMessage, protocol.UserMessage{Text: fmt.Sprintf("part %d: %s", i, big)})
		s.waitFor(t, "an answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) == i+1 })
	}
	var summary, after *fakeRequest
	for i, r := range or.Requests() {
		if r.Model == "fake/summary" {
			summary = &or.Requests()[i]
			if i+1 < len(or.Requests()) {
				after = &or.Requests()[i+1]
			}
		}
	}
	if summary == nil {
		t.Fatalf("no summary request among %d requests", len(or.Requests()))
	}
	if len(summary.Tools) != 0 {
		t.Errorf("the summary request carries %d tools, want none", len(summary.Tools))
	}
	if after == nil || len(after.Messages) < 2 || !strings.Contains(after.Messages[1].text(), "SUMMARY: the person sent long texts") {
		t.Fatalf("the request after the summary does not start with it")
	}
	if !strings.Contains(after.Messages[1].text(), "The person's latest messages") {
		t.Errorf("the person's latest messages are not kept after the summary")
	}
	if after.Model != "fake/model" || len(after.Tools) == 0 {
		t.Errorf("the turn's own request = model %s with %d tools, want its model with tools", after.Model, len(after.Tools))
	}
}

// TestPrepareSleepHoldsWork: prepare-sleep gives a running tool its grace,
// then cuts the turn; no new work starts (not even the answer the chat now
// owes) until a key push lifts the hold; then the owed answer is given and
// the cut call is reported interrupted once.
func TestPrepareSleepHoldsWork(t *testing.T) {
	tools := &fakeTools{hold: make(chan struct{})}
	h := startEngine(t, t.TempDir(), nil, tools, func(c *Config) { c.Grace = 100 * time.Millisecond })
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_exec {"cmd":"sleep 70"}`})
	s.waitFor(t, "EXECUTING", func(evs []protocol.OutboundEvent) bool {
		for _, e := range ofType(evs, protocol.EventAgentState) {
			if decode[protocol.AgentStateChanged](t, e).State == protocol.StateExecuting {
				return true
			}
		}
		return false
	})
	if code, body := call(t, h.c, "POST", "/prepare-sleep", nil); code != 204 {
		t.Fatalf("prepare-sleep = %d %s", code, body)
	}
	n := len(h.or.Requests())
	// Something that is not a key push or an inbound event changes nothing.
	call(t, h.c, "PUT", "/config", testConfig(map[string]protocol.Decision{"files.read": protocol.Ask}))
	time.Sleep(300 * time.Millisecond)
	if got := len(h.or.Requests()); got != n {
		t.Fatalf("%d model requests during the hold, want none", got-n)
	}
	if countType(s.Events(), protocol.EventMessageAssistant) != 0 {
		t.Fatalf("the chat answered during the hold")
	}
	call(t, h.c, "POST", "/secrets", protocol.SecretsRequest{OpenRouterAPIKey: "sk-or-test-key-123"})
	evs := s.waitFor(t, "the owed answer", hasType(protocol.EventMessageAssistant))
	called := ofType(evs, protocol.EventToolCalled)
	if len(called) != 1 {
		t.Fatalf("%d tool.called, want the interrupted call once: %s", len(called), describe(evs))
	}
	if tc := decode[protocol.ToolCalled](t, called[0]); tc.Interrupted == nil || !*tc.Interrupted {
		t.Errorf("tool.called = %s, want interrupted", called[0].Data)
	}
	ans := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0])
	if ans.InReplyTo == nil || *ans.InReplyTo != "m1" {
		t.Errorf("owed answer in_reply_to = %v, want m1", ans.InReplyTo)
	}
}

// TestInterruptedCallSaysItsTerminal: a call cut by a sleep is reported
// from its intent, and the intent keeps whether the call starts a terminal
// session (ref 5.4 tool.called tty), so the interrupted tool.called says
// tty: true for exec with tty and nothing for any other call.
func TestInterruptedCallSaysItsTerminal(t *testing.T) {
	yes := true
	tests := map[string]struct {
		reason  string
		args    string
		wantTTY *bool
	}{
		"terminal": {reason: "exec with tty starts a terminal session", args: `{"cmd":"python3","tty":true}`, wantTTY: &yes},
		"command":  {reason: "a plain command says nothing of a terminal", args: `{"cmd":"sleep 70"}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tools := &fakeTools{hold: make(chan struct{})}
			h := startEngine(t, t.TempDir(), nil, tools, func(c *Config) { c.Grace = 100 * time.Millisecond })
			s := openStream(t, h.c, 0, false)
			h.configure(testConfig(nil))
			h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "run fake_exec " + tc.args})
			s.waitFor(t, "EXECUTING", func(evs []protocol.OutboundEvent) bool {
				for _, e := range ofType(evs, protocol.EventAgentState) {
					if decode[protocol.AgentStateChanged](t, e).State == protocol.StateExecuting {
						return true
					}
				}
				return false
			})
			if code, body := call(t, h.c, "POST", "/prepare-sleep", nil); code != 204 {
				t.Fatalf("prepare-sleep = %d %s", code, body)
			}
			call(t, h.c, "POST", "/secrets", protocol.SecretsRequest{OpenRouterAPIKey: "sk-or-test-key-123"})
			evs := s.waitFor(t, "the interrupted call", hasType(protocol.EventToolCalled))
			got := decode[protocol.ToolCalled](t, ofType(evs, protocol.EventToolCalled)[0])
			if got.Interrupted == nil || !*got.Interrupted {
				t.Fatalf("tool.called = %+v, want interrupted", got)
			}
			if diff := cmp.Diff(tc.wantTTY, got.TTY); diff != "" {
				t.Errorf("%s: tool.called tty (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// fakeAgentd is the stand-in for dot-agentd's local socket: the file routes
// over a map.
type fakeAgentd struct {
	mu    sync.Mutex
	files map[string][]byte
}

func serveFakeAgentd(t *testing.T, sock string) *fakeAgentd {
	f := &fakeAgentd{files: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.PathFiles, func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.files[r.URL.Query().Get(protocol.QueryPath)]
		f.mu.Unlock()
		if !ok {
			w.WriteHeader(404)
			json.NewEncoder(w).Encode(protocol.ErrorResponse{Error: protocol.ErrNotFound})
			return
		}
		w.Write(b)
	})
	mux.HandleFunc("PUT "+protocol.PathFiles, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.files[r.URL.Query().Get(protocol.QueryPath)] = b
		f.mu.Unlock()
		w.WriteHeader(204)
	})
	mux.HandleFunc("GET "+protocol.PathFilesList, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(404)
		json.NewEncoder(w).Encode(protocol.ErrorResponse{Error: protocol.ErrNotFound})
	})
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return f
}

func (f *fakeAgentd) get(p string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[p]
	return string(b), ok
}

// TestRealToolsThroughAStandInAgentd runs the product's tool table and file
// client: write_file reaches dot-agentd's file route, and the conversation
// file goes the same way.
func TestRealToolsThroughAStandInAgentd(t *testing.T) {
	dir := t.TempDir()
	or := newFakeOpenRouter(t)
	cfg := Config{AgentSocket: filepath.Join(dir, "agent.sock"), AgentdSocket: filepath.Join(dir, "agentd.sock"),
		Workspace: "/home/dot/workspace", StateDir: filepath.Join(dir, "state"), ModelUser: "nobody", AgentdBin: "/bin/false"}
	agentd := serveFakeAgentd(t, cfg.AgentdSocket)
	ctx, cancel := contextWithCancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Deps{Model: or.client(), Ready: func() { close(ready) }, Log: quietLog()})
	}()
	defer func() { cancel(); <-done }()
	<-ready
	c := unixClient(cfg.AgentSocket)
	s := openStream(t, c, 0, false)
	call(t, c, "PUT", "/config", testConfig(nil))
	call(t, c, "POST", "/secrets", protocol.SecretsRequest{OpenRouterAPIKey: "sk-or-test-key-123"})
	raw, _ := json.Marshal(protocol.UserMessage{Text: `run write_file {"path":"notes.md","content":"hello"}`})
	call(t, c, "POST", "/events", protocol.InboundEvent{ID: "m1", Type: protocol.InboundUserMessage, Data: raw})
	evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	tc := decode[protocol.ToolCalled](t, ofType(evs, protocol.EventToolCalled)[0])
	if tc.Tool != "write_file" || !tc.OK || tc.Target == nil || *tc.Target != "notes.md" {
		t.Errorf("tool.called = %s", ofType(evs, protocol.EventToolCalled)[0].Data)
	}
	if got, _ := agentd.get("/home/dot/workspace/notes.md"); got != "hello" {
		t.Errorf("file through dot-agentd = %q, want hello", got)
	}
	// The conversation file is written when the turn ends, just after its
	// answer is told: wait for it rather than read it at once.
	conversation := "/home/dot/conversations/chat/" + time.Now().UTC().Format("2006-01-02") + ".md"
	got, _ := agentd.get(conversation)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(got, "- called write_file: notes.md"); got, _ = agentd.get(conversation) {
		if time.Now().After(deadline) {
			t.Fatalf("conversation file through dot-agentd = %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNetworkCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if c := networkCheck(ln.Addr().String())(context.Background()); !c.OK || c.Name != "network" {
		t.Errorf("reachable = %+v", c)
	}
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := closed.Addr().String()
	closed.Close()
	if c := networkCheck(addr)(context.Background()); c.OK || !strings.Contains(c.Detail, "not reachable") {
		t.Errorf("unreachable = %+v", c)
	}
}
