package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func delegationConfig(perms map[string]protocol.Decision, canAsk ...string) protocol.RuntimeConfig {
	c := testConfig(perms)
	if len(canAsk) > 0 {
		c.Delegation = &protocol.DelegationConfig{CanAsk: canAsk}
	}
	return c
}

// offeredTool says whether GET /tools reports the tool offered.
func offeredTool(t *testing.T, h *harness, name string) bool {
	t.Helper()
	_, body := call(t, h.c, "GET", "/tools", nil)
	var got protocol.Tools
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("GET /tools: %v: %s", err, body)
	}
	for _, tl := range got.Tools {
		if tl.Name == name {
			return tl.Offered
		}
	}
	t.Fatalf("GET /tools does not list %s: %s", name, body)
	return false
}

func TestDelegateTaskIsOfferedOnlyToADotThatMayAsk(t *testing.T) {
	h := startEngineWithMCP(t)
	cases := []struct {
		reason string
		cfg    protocol.RuntimeConfig
		want   bool
	}{
		{"no delegation in the config", delegationConfig(nil), false},
		{"canAsk names a Dot, the permission's default (ask)", delegationConfig(nil, "researcher"), true},
		{"canAsk names a Dot, the permission denied", delegationConfig(map[string]protocol.Decision{"dots.delegate": protocol.Deny}, "researcher"), false},
	}
	for _, c := range cases {
		h.configure(c.cfg)
		if got := offeredTool(t, h, "delegate_task"); got != c.want {
			t.Errorf("%s: delegate_task offered = %v, want %v", c.reason, got, c.want)
		}
	}
}

func TestDelegateTaskAsksAndReportsItsArguments(t *testing.T) {
	h := startEngineWithMCP(t)
	s := openStream(t, h.c, 0, false)
	h.configure(delegationConfig(nil, "researcher"))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run delegate_task {"dot":"researcher","description":"find the price","priority":5}`})
	evs := s.waitFor(t, "the approval", hasType(protocol.EventApprovalRequested))
	ar := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[0])
	if ar.Tool != "delegate_task" || ar.Permission != "dots.delegate" {
		t.Errorf("approval.requested = %+v, want delegate_task under dots.delegate", ar)
	}
	if n := countType(evs, protocol.EventToolCalled); n != 0 {
		t.Errorf("%d tool.called before the approval", n)
	}
	h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalApprove})
	evs = s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	called := ofType(evs, protocol.EventToolCalled)
	if len(called) != 1 {
		t.Fatalf("%d tool.called, want 1: %s", len(called), describe(evs))
	}
	tc := decode[protocol.ToolCalled](t, called[0])
	if tc.Tool != "delegate_task" || tc.Permission != "dots.delegate" || tc.Decision != protocol.Ask || !tc.OK ||
		tc.Target == nil || *tc.Target != "researcher" {
		t.Errorf("tool.called = %+v, want delegate_task, dots.delegate, ask, ok, target researcher", tc)
	}
	var args any
	if err := json.Unmarshal(tc.Arguments, &args); err != nil {
		t.Fatalf("tool.called arguments %s: %v", tc.Arguments, err)
	}
	want := map[string]any{"dot": "researcher", "description": "find the price", "priority": float64(5)}
	if d := cmp.Diff(want, args); d != "" {
		t.Errorf("tool.called arguments (-want +got):\n%s", d)
	}
	ans := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0])
	if !strings.Contains(ans.Text, "Asked researcher; its answer will arrive later as a system event") {
		t.Errorf("the model read %q, want that the answer comes later", ans.Text)
	}

	// The answer arrives as a system.event and the chat answers it.
	h.send("delegation-x", protocol.InboundSystemEvent, protocol.SystemEvent{Name: protocol.SystemEventDelegation,
		Data: mustJSON(t, protocol.Delegation{Dot: "researcher", Task: "researcher-from-x", Outcome: "COMPLETED", Text: "researcher answered: 42 EUR"})})
	evs = s.waitFor(t, "the chat's answer to the delegation", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventMessageAssistant) == 2
	})
	ans = decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[1])
	if !strings.Contains(ans.Text, "[Delegation: researcher, completed] researcher answered: 42 EUR") {
		t.Errorf("the chat answered %q, want it told the delegation's answer", ans.Text)
	}
	// The note that a request was passed on is kept without a turn.
	h.send("delegation-accepted", protocol.InboundSystemEvent, protocol.SystemEvent{Name: protocol.SystemEventDelegation,
		Data: mustJSON(t, protocol.Delegation{Dot: "researcher", Task: "researcher-from-y", Outcome: protocol.DelegationAccepted, Text: "passed on"})})
	time.Sleep(300 * time.Millisecond)
	if n := countType(s.Events(), protocol.EventMessageAssistant); n != 2 {
		t.Errorf("%d answers after the note that the request was passed on, want 2 (no turn for it)", n)
	}
	// Every other tool's tool.called carries no arguments.
	for _, ev := range ofType(evs, protocol.EventToolCalled) {
		if tc := decode[protocol.ToolCalled](t, ev); tc.Tool != "delegate_task" && tc.Arguments != nil {
			t.Errorf("tool.called of %s carries arguments", tc.Tool)
		}
	}
}

func TestDelegateTaskRefusesADotTheConfigDoesNotName(t *testing.T) {
	h := startEngineWithMCP(t)
	s := openStream(t, h.c, 0, false)
	h.configure(delegationConfig(map[string]protocol.Decision{"dots.delegate": protocol.Allow}, "researcher"))
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run delegate_task {"dot":"stranger","description":"do it"}`})
	evs := s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	tc := decode[protocol.ToolCalled](t, ofType(evs, protocol.EventToolCalled)[0])
	if tc.OK || tc.Arguments != nil {
		t.Errorf("tool.called = %+v, want a failed call without arguments (the host has nothing to act on)", tc)
	}
	ans := decode[protocol.MessageAssistant](t, ofType(evs, protocol.EventMessageAssistant)[0])
	if !strings.Contains(ans.Text, `does not let you ask "stranger"; you may ask: researcher`) {
		t.Errorf("the model read %q", ans.Text)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
