package daemon

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// TestTheModelAsOpenRouterSpeaks runs a task against the stand-in OpenRouter
// in each of the ways the documented wire goes (comments between chunks,
// mid-stream errors, cut streams, empty answers, long Retry-After, 402, a
// window overflow, BYOK usage, parallel calls split across chunks, a reasoning
// model that needs its reasoning back) and checks what a person sees: how the
// task ended and with what, how many requests were made, what was spent, and
// which calls ran.
func TestTheModelAsOpenRouterSpeaks(t *testing.T) {
	tests := map[string]struct {
		reason    string
		text      string
		faults    []fault
		byok      bool
		reasoning bool // the model reasons and refuses a tool loop without it
		// what the person sees
		wantSummary  string // task.completed's summary; "" = the task must fail
		wantError    string // task.failed's error (a prefix)
		wantRequests int    // chat requests of the turn's model
		wantSpent    float64
		wantRuns     []string
		wantProgress string // a task.progress text (a part of it)
	}{
		"comments and parallel calls split across chunks": {
			reason:      "two calls whose pieces interleave each run once; the answer completes the task",
			text:        `run fake_write {"path":"a"} fake_exec {"cmd":"ls"}`,
			wantSummary: `done: ran fake_exec {"cmd":"ls"}`, wantRequests: 2, wantSpent: 0.002,
			wantRuns: []string{`fake_write {"path":"a"}`, `fake_exec {"cmd":"ls"}`},
		},
		"a mid-stream error event is retried": {
			reason:      "HTTP 200, some text, then an error chunk: tried again, the partial text dropped, the failed attempt costs nothing",
			text:        "hello",
			faults:      []fault{faultMidStream},
			wantSummary: "echo: hello", wantRequests: 2, wantSpent: 0.001,
		},
		"a cut stream is retried": {
			reason:      "a stream that drops after some text is a 5xx in all but name",
			text:        "hello",
			faults:      []fault{faultCut, faultCut},
			wantSummary: "echo: hello", wantRequests: 3, wantSpent: 0.001,
		},
		"no call runs from a stream cut inside it": {
			reason:      "the cut attempt's half call never runs; the retried whole one runs once",
			text:        `run fake_write {"path":"a"}`,
			faults:      []fault{faultCutInCall},
			wantSummary: `done: ran fake_write {"path":"a"}`, wantRequests: 3, wantSpent: 0.002,
			wantRuns: []string{`fake_write {"path":"a"}`},
		},
		"an empty answer is asked again": {
			reason:      "content \"\" with finish stop is no answer: asked once more, and the real answer completes the task",
			text:        "hello",
			faults:      []fault{faultEmpty},
			wantSummary: "the answer, asked again", wantRequests: 2, wantSpent: 0.002,
		},
		"two empty answers fail the task": {
			reason:    "never task.completed with an empty summary",
			text:      "hello",
			faults:    []fault{faultEmpty, faultEmpty},
			wantError: "the model gave no answer", wantRequests: 2, wantSpent: 0.002,
		},
		"a Retry-After past the bound is waited and said": {
			reason:      "429 with Retry-After 600: the client waits its bound, says so in task.progress, and the task goes on",
			text:        "hello",
			faults:      []fault{faultLongWait},
			wantSummary: "echo: hello", wantRequests: 2, wantSpent: 0.001,
			wantProgress: "OpenRouter asked to wait 10m0s before trying again; waiting 1m0s",
		},
		"402 fails at once naming the credits": {
			reason:    "out of credits is not retried",
			text:      "hello",
			faults:    []fault{faultNoCredits},
			wantError: "the model request failed: openrouter answered 402: Insufficient credits.", wantRequests: 1,
		},
		"a context-length 400 compacts and asks again": {
			reason: "the provider counted more than the window: the thread is summarized and the request asked again",
			text:   "hello",
			faults: []fault{faultContextLength},
			// The stand-in answers the last user message: after the
			// compaction that is the summary.
			wantSummary:  "echo: [Summary of the earlier conversation, written for you to resume the work]\nSUMMARY: the person sent long texts",
			wantRequests: 2, wantSpent: 0.002, // the summary request costs too
		},
		"a second context-length 400 fails naming the window": {
			reason:    "asked again once only",
			text:      "hello",
			faults:    []fault{faultContextLength, faultContextLength},
			wantError: "the conversation does not fit the model's context window of 100000 tokens even after it was compacted", wantRequests: 2, wantSpent: 0.001,
		},
		"BYOK usage counts the upstream cost": {
			reason:      "usage.cost is OpenRouter's fee, cost_details.upstream_inference_cost the provider's charge: both count",
			text:        "hello",
			byok:        true,
			wantSummary: "echo: hello", wantRequests: 1, wantSpent: 0.003,
		},
		"a reasoning model gets its reasoning back": {
			reason:      "a model that refuses a tool loop without its signed reasoning finishes a multi-step task",
			text:        `run fake_write {"path":"a"}`,
			reasoning:   true,
			wantSummary: `done: ran fake_write {"path":"a"}`, wantRequests: 2, wantSpent: 0.002,
			wantRuns: []string{`fake_write {"path":"a"}`},
		},
		"finish_reason length inside a call's arguments": {
			reason:      "the cut call never runs; the model is asked to go on",
			text:        "LENGTH please",
			wantSummary: "finished after the cut", wantRequests: 2, wantSpent: 0.002,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			or := newFakeOpenRouter(t)
			or.faults, or.byok, or.reasoning, or.needReasoning = tc.faults, tc.byok, tc.reasoning, tc.reasoning
			tools := &fakeTools{}
			h := startEngine(t, t.TempDir(), or, tools)
			s := openStream(t, h.c, 0, false)
			h.configure(testConfig(nil))
			h.send("t1", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "x", Description: tc.text})
			evs := s.waitFor(t, "the task's end", func(evs []protocol.OutboundEvent) bool {
				return hasType(protocol.EventTaskCompleted)(evs) || hasType(protocol.EventTaskFailed)(evs)
			})
			var spent float64
			if tc.wantSummary != "" {
				done := ofType(evs, protocol.EventTaskCompleted)
				if len(done) != 1 {
					t.Fatalf("%s\n%d task.completed, want 1: %s", tc.reason, len(done), describe(evs))
				}
				got := decode[protocol.TaskCompleted](t, done[0])
				if got.Summary != tc.wantSummary {
					t.Errorf("%s\nsummary = %q, want %q", tc.reason, got.Summary, tc.wantSummary)
				}
				spent = *got.SpentUSD
			} else {
				if n := countType(evs, protocol.EventTaskCompleted); n != 0 {
					t.Fatalf("%s\nthe task completed: %s", tc.reason, describe(evs))
				}
				got := decode[protocol.TaskFailed](t, ofType(evs, protocol.EventTaskFailed)[0])
				if !strings.HasPrefix(got.Error, tc.wantError) {
					t.Errorf("%s\ntask.failed error = %q, want it to begin %q", tc.reason, got.Error, tc.wantError)
				}
				if strings.Contains(got.Error, "sk-or-test") {
					t.Errorf("the error carries the key: %q", got.Error)
				}
				spent = *got.SpentUSD
			}
			if math.Abs(spent-tc.wantSpent) > 1e-9 {
				t.Errorf("%s\nspent %.4f USD, want %.4f", tc.reason, spent, tc.wantSpent)
			}
			turnRequests := 0
			for _, r := range or.Requests() {
				if !strings.Contains(r.Messages[0].text(), "You write a handoff summary") {
					turnRequests++
				}
			}
			if turnRequests != tc.wantRequests {
				t.Errorf("%s\n%d requests of the turn's model, want %d", tc.reason, turnRequests, tc.wantRequests)
			}
			if got := tools.Runs(); strings.Join(got, "\n") != strings.Join(tc.wantRuns, "\n") {
				t.Errorf("%s\ncalls run = %q, want %q", tc.reason, got, tc.wantRuns)
			}
			if tc.wantProgress != "" {
				found := false
				for _, e := range ofType(evs, protocol.EventTaskProgress) {
					found = found || strings.Contains(decode[protocol.TaskProgress](t, e).Text, tc.wantProgress)
				}
				if !found {
					t.Errorf("%s\nno task.progress says %q: %s", tc.reason, tc.wantProgress, describe(evs))
				}
			}
		})
	}
}

// TestEmptyChatAnswerSaysSo: a chat turn whose model answers nothing twice
// answers the person that it could not, never an empty message.
func TestEmptyChatAnswerSaysSo(t *testing.T) {
	or := newFakeOpenRouter(t)
	or.faults = []fault{faultEmpty, faultEmpty}
	h := startEngine(t, t.TempDir(), or, nil)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "hello"})
	evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	answers := ofType(evs, protocol.EventMessageAssistant)
	if got := decode[protocol.MessageAssistant](t, answers[0]).Text; len(answers) != 1 || got != "I could not answer: the model gave no answer" {
		t.Errorf("%d answers, the first %q; want one saying the model gave no answer", len(answers), got)
	}
}

// TestReasoningGoesBackAndStaysOutOfTheFiles: the second request of a tool
// loop carries the first answer's reasoning exactly as it came (every
// detail, the signature and the encrypted block), and the conversation file
// shows no reasoning at all.
func TestReasoningGoesBackAndStaysOutOfTheFiles(t *testing.T) {
	or := newFakeOpenRouter(t)
	or.reasoning, or.needReasoning = true, true
	h := startEngine(t, t.TempDir(), or, nil)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a"}`})
	s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	reqs := or.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	var sent *fakeMessage
	for i, m := range reqs[1].Messages {
		if len(m.ToolCalls) > 0 {
			sent = &reqs[1].Messages[i]
		}
	}
	if sent == nil {
		t.Fatal("the second request has no assistant call")
	}
	var details []map[string]any
	if err := json.Unmarshal(sent.ReasoningDetails, &details); err != nil || len(details) != 3 {
		t.Fatalf("reasoning_details sent back = %s (%v), want the three details", sent.ReasoningDetails, err)
	}
	want := []string{"reasoning.text|Thinking it over.|sig-call_0", "reasoning.summary|Planned the step.|", "reasoning.encrypted|ENCRYPTED-BLOB-gAAAAB|"}
	for i, d := range details {
		text, _ := d["text"].(string)
		if v, ok := d["summary"].(string); ok {
			text = v
		}
		if v, ok := d["data"].(string); ok {
			text = v
		}
		sig, _ := d["signature"].(string)
		if got := d["type"].(string) + "|" + text + "|" + sig; got != want[i] {
			t.Errorf("detail %d = %s, want %s", i, got, want[i])
		}
	}
	if sent.Reasoning != "Thinking it over." {
		t.Errorf("reasoning sent back = %q", sent.Reasoning)
	}
	file := waitForFile(t, h, "/home/dot/conversations/chat/", "done: ran")
	for _, secret := range []string{"ENCRYPTED-BLOB", "Thinking it over", "Planned the step", "sig-call_0"} {
		if strings.Contains(file, secret) {
			t.Errorf("the conversation file shows the reasoning (%q):\n%s", secret, file)
		}
	}
}

// TestReasoningTokensAreCounted: the reasoning tokens the model reports
// (completion_tokens_details.reasoning_tokens) are added up in the ledger of
// the spend and sent beside spent_usd, over the same span: the chat's since
// its last answer, a task's whole run; a model that reports none sends no
// key.
func TestReasoningTokensAreCounted(t *testing.T) {
	or := newFakeOpenRouter(t)
	h := startEngine(t, t.TempDir(), or, nil)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	tokens := func(ev protocol.OutboundEvent) string {
		var d struct {
			ReasoningTokens *int64 `json:"reasoning_tokens"`
		}
		json.Unmarshal(ev.Data, &d)
		if d.ReasoningTokens == nil {
			return "absent"
		}
		return strconv.FormatInt(*d.ReasoningTokens, 10)
	}

	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "hello"})
	evs := s.waitFor(t, "the first answer", hasType(protocol.EventMessageAssistant))
	if got := tokens(ofType(evs, protocol.EventMessageAssistant)[0]); got != "absent" {
		t.Errorf("an answer of a model that reports no reasoning carries reasoning_tokens %s", got)
	}

	or.mu.Lock()
	or.reasoning = true // 3 reasoning tokens a response
	or.mu.Unlock()
	h.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a"}`})
	evs = s.waitFor(t, "the second answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) >= 2 })
	if got := tokens(ofType(evs, protocol.EventMessageAssistant)[1]); got != "6" {
		t.Errorf("an answer after two requests of 3 reasoning tokens carries %s, want 6", got)
	}
	h.send("m3", protocol.InboundUserMessage, protocol.UserMessage{Text: "hello again"})
	evs = s.waitFor(t, "the third answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) >= 3 })
	if got := tokens(ofType(evs, protocol.EventMessageAssistant)[2]); got != "3" {
		t.Errorf("the next answer carries %s, want 3: the chat's count starts again with each answer, as its spend does", got)
	}

	h.send("t1", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "job", Description: `run fake_write {"path":"b"}`})
	evs = s.waitFor(t, "the task's end", hasType(protocol.EventTaskCompleted))
	done := ofType(evs, protocol.EventTaskCompleted)[0]
	if got := tokens(done); got != "6" {
		t.Errorf("task.completed carries reasoning_tokens %s, want 6 (%s)", got, done.Data)
	}
	for _, ev := range evs {
		if _, err := protocol.ParseOutbound(ev); err != nil {
			t.Errorf("the host refuses %s: %v", ev.Type, err)
		}
	}
}

// waitForFile waits (5 s at most) for a file under prefix that holds want,
// and returns it: a conversation file is written after the turn's end.
func waitForFile(t *testing.T, h *harness, prefix, want string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f := h.files.Under(prefix)
		if strings.Contains(f, want) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("no file under %s holds %q: %q", prefix, want, f)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRequestsAreSizedFromTheProvidersCount: the second request of a turn is
// measured from the prompt size the provider reported for the first, so a
// prompt the estimate thinks small but the provider counted near the window
// asks for no more answer than the window leaves, with the margin.
func TestRequestsAreSizedFromTheProvidersCount(t *testing.T) {
	or := newFakeOpenRouter(t)
	or.prompt = 91000 // of a window of 100000, answers of at most 8000
	h := startEngine(t, t.TempDir(), or, nil)
	s := openStream(t, h.c, 0, false)
	h.configure(testConfig(nil))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a"}`})
	s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	reqs := or.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if reqs[0].MaxTokens != 8000 {
		t.Errorf("first request max_tokens = %d, want the longest answer 8000", reqs[0].MaxTokens)
	}
	// 100000 - 91000 - what was added (a call and its result, a few dozen
	// tokens) - the margin of 2000: under 7000.
	if got := reqs[1].MaxTokens; got >= 7000 || got < 6000 {
		t.Errorf("second request max_tokens = %d, want what the window leaves after the provider's 91000 and the margin (6000..6999)", got)
	}
}
