package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// recordingSender stands in for the adapter's sends at the edge of the
// test; fail makes the next sends fail with it.
type recordingSender struct {
	mu      sync.Mutex
	sent    []string
	fail    []error
	prompts int
}

func (r *recordingSender) SendText(_ context.Context, chat, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fail) > 0 {
		err := r.fail[0]
		r.fail = r.fail[1:]
		return err
	}
	r.sent = append(r.sent, chat+": "+text)
	return nil
}

func (r *recordingSender) SendApproval(_ context.Context, chat, text, approvalID string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fail) > 0 {
		err := r.fail[0]
		r.fail = r.fail[1:]
		return "", err
	}
	r.prompts++
	ref := fmt.Sprintf("prompt-%d", r.prompts)
	r.sent = append(r.sent, chat+": [prompt "+ref+" for "+approvalID+"] "+text)
	return ref, nil
}

func (r *recordingSender) EditApproval(_ context.Context, chat, ref, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, chat+": [edit "+ref+"] "+text)
	return nil
}

func (r *recordingSender) Typing(_ context.Context, chat string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, chat+": (typing)")
	return nil
}

func (r *recordingSender) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sent
	r.sent = nil
	return out
}

var guestSeq int64

func guestSays(t *testing.T, dot store.Dot, typ string, data any) {
	t.Helper()
	b, _ := json.Marshal(data)
	guestSeq++
	seq := guestSeq
	if _, err := testStore.AppendEvents(context.Background(), store.Event{Dot: dot, Type: typ, Source: store.SourceGuest, GuestSeq: &seq, Data: b}); err != nil {
		t.Fatal(err)
	}
}

func TestOutboundSendsEachAnswerWhereItBelongs(t *testing.T) {
	ctx := context.Background()
	in, _ := newInbound(t)
	b, dot := in.Binding, in.Binding.Dot
	// History before the channel existed is not replayed into a chat.
	if _, err := testStore.PostMessage(ctx, dot, "an old web message", store.Origin{Channel: store.ChannelAPI}); err != nil {
		t.Fatal(err)
	}
	guestSays(t, dot, "message.assistant", map[string]any{"text": "an old answer"})

	code, hash := channels.NewPairingCode()
	_ = testStore.AddPairingCode(ctx, b.UID, dot.UID, hash, time.Now().Add(time.Minute))
	send := &recordingSender{}
	out := &Outbound{Binding: b, Store: testStore, Send: send, NotifyTasks: true, Log: logr.Discard()}
	if err := out.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := send.take(); len(got) != 0 {
		t.Fatalf("a new channel replayed the history: %v", got)
	}
	if err := in.Inbound(ctx, msg("42", "42", true, "777:1", "/start "+code)); err != nil {
		t.Fatal(err)
	}

	// Ada asks through the channel; the Dot thinks, then answers her.
	if err := in.Inbound(ctx, msg("42", "42", true, "777:2", "what's on today?")); err != nil {
		t.Fatal(err)
	}
	events, _ := testStore.EventsAfter(ctx, dot.UID, 0, 100)
	asked := events[len(events)-1]
	guestSays(t, dot, "agent.state", map[string]any{"state": "THINKING"})
	guestSays(t, dot, "message.assistant", map[string]any{"text": "Two meetings.", "in_reply_to": store.MessageID(asked.ID)})
	// A message of the web client, answered: not mirrored to the chat.
	web, _ := testStore.PostMessage(ctx, dot, "and from the web?", store.Origin{Channel: store.ChannelAPI})
	guestSays(t, dot, "message.assistant", map[string]any{"text": "web answer", "in_reply_to": web.MessageID})
	// An automation's answer and a task's end go to the owners.
	guestSays(t, dot, "message.assistant", map[string]any{"text": "Your 8:00 reminder."})
	guestSays(t, dot, "task.completed", map[string]any{"task_id": "t1", "summary": "booked the 9:40"})
	if err := out.Step(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"42: (typing)", "42: Two meetings.", "42: Your 8:00 reminder.", "42: Task done: booked the 9:40"}
	if got := send.take(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("sent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A send that fails is tried again at the next step; nothing is lost
	// and nothing after it goes first.
	guestSays(t, dot, "task.failed", map[string]any{"task_id": "t2", "error": "the site was down"})
	send.fail = []error{errors.New("Telegram, to send a message: connection reset")}
	if err := out.Step(ctx); err == nil {
		t.Fatal("a failed send was not reported")
	}
	if err := out.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := send.take(); len(got) != 1 || got[0] != "42: Task failed: the site was down" {
		t.Errorf("after a failed send: %v; want it sent once, at the next step", got)
	}
	// Refused for good (the person blocked the bot): dropped, not retried.
	guestSays(t, dot, "message.assistant", map[string]any{"text": "a reminder nobody gets"})
	send.fail = []error{channels.ErrRefused}
	if err := out.Step(ctx); err != nil {
		t.Fatalf("a refusal for good: %v; want it dropped", err)
	}
	if err := out.Step(ctx); err != nil || len(send.take()) != 0 {
		t.Errorf("a refused message was sent again")
	}

	// With task notices off, only answers to the person's own messages go.
	quiet := &Outbound{Binding: b, Store: testStore, Send: send, NotifyTasks: false, Log: logr.Discard()}
	guestSays(t, dot, "task.completed", map[string]any{"task_id": "t3", "summary": "done quietly"})
	guestSays(t, dot, "message.assistant", map[string]any{"text": "an automation, quietly"})
	if err := quiet.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := send.take(); len(got) != 0 {
		t.Errorf("with notifyTasks off: %v; want nothing", got)
	}
}
