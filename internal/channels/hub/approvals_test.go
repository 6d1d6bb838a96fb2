package hub

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// fakeApprovals stands in for the control plane's Approvals at the edge of
// the test: requests by id, answered once.
type fakeApprovals struct {
	mu      sync.Mutex
	asked   []Asked
	outcome map[string]Outcome
	by      map[string]string
	// unmade counts the answers to an id that find no Approval yet (the
	// log asked; the controller has not made it).
	unmade map[string]int
}

func newFakeApprovals(asked ...Asked) *fakeApprovals {
	f := &fakeApprovals{outcome: map[string]Outcome{}, by: map[string]string{}, unmade: map[string]int{}}
	for _, a := range asked {
		f.ask(a)
	}
	return f
}

func (f *fakeApprovals) ask(a Asked) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, a)
	f.outcome[a.ID] = OutcomePending
}

func (f *fakeApprovals) Pending(context.Context, store.Dot) ([]Asked, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Asked
	for _, a := range f.asked {
		if f.outcome[a.ID] == OutcomePending {
			out = append(out, a)
		}
	}
	return out, nil
}

func (f *fakeApprovals) Outcome(_ context.Context, _ store.Dot, id string) (Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outcome[id], nil
}

func (f *fakeApprovals) Answer(_ context.Context, _ store.Dot, id string, approve bool, by string) (Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.outcome[id]
	if !ok || f.unmade[id] > 0 {
		f.unmade[id]--
		return OutcomeUnknown, ErrAnswered
	}
	if o != OutcomePending {
		return o, ErrAnswered
	}
	o = OutcomeRejected
	if approve {
		o = OutcomeApproved
	}
	f.outcome[id], f.by[id] = o, by
	return o, nil
}

// wordsSender is a channel without buttons (WhatsApp's shape).
type wordsSender struct{ recordingSender }

func (*wordsSender) ApprovalsByText() bool { return true }

// pairedPrompts is a binding with Ada (42) paired as an owner, and its
// prompts over send and approvals.
func pairedPrompts(t *testing.T, send Prompter, approvals Approvals) (*Prompts, *Inbound) {
	t.Helper()
	ctx := context.Background()
	in, _ := newInbound(t)
	code, hash := channels.NewPairingCode()
	if err := testStore.AddPairingCode(ctx, in.Binding.UID, in.Binding.Dot.UID, hash, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := in.Inbound(ctx, msg("42", "42", true, "777:1", "/start "+code)); err != nil {
		t.Fatal(err)
	}
	p := &Prompts{Binding: in.Binding, Store: testStore, Approvals: approvals, Send: send, On: true, ShowArguments: true, Log: logr.Discard()}
	in.Prompts = p
	return p, in
}

func TestApprovalsInWordsFromAnOwnerOnly(t *testing.T) {
	ctx := context.Background()
	send := &wordsSender{}
	approvals := newFakeApprovals(Asked{ID: "appr_0123456789abcdef", Tool: "exec", Permission: "computer.exec",
		Reason: "run the build", Arguments: json.RawMessage(`{"command":"make"}`)})
	p, in := pairedPrompts(t, send, approvals)
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sent := send.take()
	if len(sent) != 1 || !strings.Contains(sent[0], `Reply "yes ap-abcdef" to approve or "no ap-abcdef" to reject.`) ||
		!strings.Contains(sent[0], "Run commands (high risk)") {
		t.Fatalf("the prompt in words: %q", sent)
	}
	said := in.Reply.(*recordingReplier)
	said.said = nil

	// A bare "yes" is a message to the Dot, never an answer.
	if err := in.Inbound(ctx, msg("42", "42", true, "777:2", "yes")); err != nil {
		t.Fatal(err)
	}
	if got := logged(t, in); got[len(got)-1] != "message.user" {
		t.Fatalf("a bare yes did not reach the Dot: %v", got)
	}
	// A stranger's answer is dropped before anything is read.
	if err := in.Inbound(ctx, msg("66", "66", true, "777:3", "yes ap-abcdef")); err != nil {
		t.Fatal(err)
	}
	if approvals.outcome["appr_0123456789abcdef"] != OutcomePending {
		t.Fatal("a stranger's words answered the approval")
	}
	// The owner's words answer it, once.
	if err := in.Inbound(ctx, msg("42", "42", true, "777:4", "YES ap-ABCDEF")); err != nil {
		t.Fatal(err)
	}
	if err := in.Inbound(ctx, msg("42", "42", true, "777:5", "no ap-abcdef")); err != nil {
		t.Fatal(err)
	}
	if err := in.Inbound(ctx, msg("42", "42", true, "777:6", "no ap-zzzzzz")); err != nil {
		t.Fatal(err)
	}
	want := []string{"42: Approved.", "42: It was answered already.", "42: That request does not exist."}
	if strings.Join(said.said, "|") != strings.Join(want, "|") {
		t.Fatalf("the hub said %q; want %q", said.said, want)
	}
	if approvals.outcome["appr_0123456789abcdef"] != OutcomeApproved || approvals.by["appr_0123456789abcdef"] != "telegram:42" {
		t.Fatalf("the approval stands %v by %q", approvals.outcome, approvals.by)
	}
	// The pairing and the bare yes: no answer in words reached the Dot.
	if got := strings.Join(logged(t, in), ","); got != "channel.peer.paired,message.user" {
		t.Fatalf("the log holds %s", got)
	}
}

func TestPromptsAreBroughtUpToDate(t *testing.T) {
	ctx := context.Background()
	send := &recordingSender{}
	approvals := newFakeApprovals(Asked{ID: "a1", Tool: "exec", Permission: "computer.exec"}, Asked{ID: "a2", TaskID: "t9", Tool: "write_file", Permission: "files.write"})
	p, _ := pairedPrompts(t, send, approvals)

	// The channel starts: a prompt for each waiting request, once.
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sent := send.take()
	if len(sent) != 2 || !strings.Contains(sent[0], "for a1]") || !strings.Contains(sent[1], "for a2]") {
		t.Fatalf("prompts at the start: %q", sent)
	}
	// a1 is answered in the web while the channel is down: the next start
	// edits its prompt.
	if _, err := approvals.Answer(ctx, store.Dot{}, "a1", false, "web"); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if sent := send.take(); len(sent) != 1 || !strings.Contains(sent[0], "[edit prompt-1]") || !strings.HasSuffix(sent[0], "Rejected.") {
		t.Fatalf("a prompt answered elsewhere: %q", sent)
	}
	// A request read again from the log after it was answered is not
	// asked.
	approvals.ask(Asked{ID: "a4", Tool: "exec", Permission: "computer.exec"})
	if _, err := approvals.Answer(ctx, store.Dot{}, "a4", true, "web"); err != nil {
		t.Fatal(err)
	}
	if sent, err := p.Ask(ctx, Asked{ID: "a4", Tool: "exec", Permission: "computer.exec"}); err != nil || sent {
		t.Fatalf("an answered request asked again: sent %v, %v", sent, err)
	}
	if sent := send.take(); len(sent) != 0 {
		t.Fatalf("an answered request asked again: %q", sent)
	}
	// a2's task ends: No longer needed.
	if _, err := p.Settle(ctx, "", "t9", OutcomeExpired); err != nil {
		t.Fatal(err)
	}
	if sent := send.take(); len(sent) != 1 || !strings.HasSuffix(sent[0], "No longer needed: the task or the day it was for has ended.") {
		t.Fatalf("a prompt of an ended task: %q", sent)
	}
	// Switched off, nothing is asked and a press is told so.
	p.On = false
	approvals.ask(Asked{ID: "a3", Tool: "exec", Permission: "computer.exec"})
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if sent := send.take(); len(sent) != 0 {
		t.Fatalf("approvals off, yet sent: %q", sent)
	}
	data, _ := channels.ButtonData(true, "a3")
	if notice, err := p.Press(ctx, channels.Press{Peer: "42", Chat: "42", Private: true, Data: data}); err != nil || notice != saidApprovalsOff {
		t.Fatalf("a press with approvals off: %q, %v", notice, err)
	}
	if approvals.outcome["a3"] != OutcomePending {
		t.Fatal("a press with approvals off decided")
	}
}

// TestAPressBeforeItsApprovalIsMadeWaitsForIt: a prompt goes out from the
// log before the Approval it answers is made; a quick press waits for it
// instead of being told the request does not exist (and lost). A press on
// a request never asked in the chat is told at once.
func TestAPressBeforeItsApprovalIsMadeWaitsForIt(t *testing.T) {
	defer func(wait, every time.Duration) { approvalMadeWait, approvalMadeEvery = wait, every }(approvalMadeWait, approvalMadeEvery)
	approvalMadeWait, approvalMadeEvery = 5*time.Second, 10*time.Millisecond
	ctx := context.Background()
	send := &recordingSender{}
	a1 := Asked{ID: "a1", Tool: "exec", Permission: "computer.exec"}
	approvals := newFakeApprovals(a1)
	p, _ := pairedPrompts(t, send, approvals)
	if sent, err := p.Ask(ctx, a1); err != nil || !sent {
		t.Fatalf("the prompt: sent %v, %v", sent, err)
	}
	approvals.unmade["a1"] = 3
	press := func(id string) string {
		t.Helper()
		data, err := channels.ButtonData(true, id)
		if err != nil {
			t.Fatal(err)
		}
		notice, err := p.Press(ctx, channels.Press{Peer: "42", Chat: "42", Private: true, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		return notice
	}
	if notice := press("a1"); notice != saidApproved || approvals.outcome["a1"] != OutcomeApproved {
		t.Fatalf("a press before the Approval was made: told %q, the approval stands %v", notice, approvals.outcome["a1"])
	}

	approvalMadeWait = time.Minute
	began := time.Now()
	if notice := press("never-asked"); notice != saidNoSuch {
		t.Fatalf("a press on a request never asked here: told %q", notice)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("a press on a request never asked here waited %s", took)
	}

	approvalMadeWait = 100 * time.Millisecond
	a2 := Asked{ID: "a2", Tool: "exec", Permission: "computer.exec"}
	approvals.ask(a2)
	if _, err := p.Ask(ctx, a2); err != nil {
		t.Fatal(err)
	}
	approvals.unmade["a2"] = 1 << 20
	if notice := press("a2"); notice != saidNoSuch {
		t.Fatalf("a press whose Approval never comes: told %q", notice)
	}
}

func TestAPromptHidesArgumentsWhenAskedAndCutsThem(t *testing.T) {
	p := &Prompts{Binding: Binding{Dot: store.Dot{Name: "helper"}}, ShowArguments: false, Send: &recordingSender{}}
	a := Asked{ID: "x", Tool: "browser_navigate", Permission: "browser.navigate", Reason: strings.Repeat("r", 500),
		Arguments: json.RawMessage(`{"url":"https://example.com/?secret=1"}`)}
	text := p.promptText(a)
	if strings.Contains(text, "secret=1") || !strings.Contains(text, "Browse (medium risk)") {
		t.Fatalf("showArguments off: %q", text)
	}
	if n := len([]rune(strings.SplitN(strings.SplitN(text, "Reason: ", 2)[1], "\n", 2)[0])); n != maxPromptPart {
		t.Fatalf("the reason is %d characters; want cut to %d", n, maxPromptPart)
	}
	p.ShowArguments = true
	if text := p.promptText(a); !strings.Contains(text, "secret=1") {
		t.Fatalf("showArguments on: %q", text)
	}
}

// TestAPromptSaysADestructiveCall: a file written outside the workspace is
// said destructive in the chat as on the web client's card; one inside is
// not.
func TestAPromptSaysADestructiveCall(t *testing.T) {
	p := &Prompts{Binding: Binding{Dot: store.Dot{Name: "helper"}}, Send: &recordingSender{}}
	out := p.promptText(Asked{ID: "x", Tool: "write_file", Permission: "files.write", Arguments: json.RawMessage(`{"path":"~/.bashrc"}`)})
	in := p.promptText(Asked{ID: "y", Tool: "write_file", Permission: "files.write", Arguments: json.RawMessage(`{"path":"notes.md"}`)})
	if !strings.Contains(out, "This is destructive") || strings.Contains(in, "destructive") {
		t.Fatalf("outside the workspace: %q\ninside: %q", out, in)
	}
}
