package hub

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// scriptedAdapter stands in for a channel's transport at the edge of the
// test: each run says it is connected, hands the hub its messages, then
// ends with the run's error (nil: runs until stopped).
type scriptedAdapter struct {
	recordingSender
	messages []channels.Inbound
	end      error
}

func (a *scriptedAdapter) Run(ctx context.Context, sink channels.Sink) error {
	sink.Connected()
	for _, m := range a.messages {
		if err := sink.Inbound(ctx, m); err != nil {
			return err
		}
	}
	if a.end != nil {
		return a.end
	}
	<-ctx.Done()
	return nil
}

func TestServeRestartsAFailedLinkAndStopsForARelink(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, _ := newInbound(t)
	b := in.Binding
	code, hash := channels.NewPairingCode()
	_ = testStore.AddPairingCode(ctx, b.UID, b.Dot.UID, hash, time.Now().Add(time.Minute))

	const secret = "123456:the-token"
	runs := []*scriptedAdapter{
		{messages: []channels.Inbound{msg("42", "42", true, "777:1", "/start "+code)}, end: errors.New("Telegram could not be reached: POST https://api.telegram.org/bot" + secret + "/getUpdates")},
		{messages: []channels.Inbound{msg("42", "42", true, "777:2", "are you there?")}},
	}
	var mu sync.Mutex
	var statuses []string
	news := make(chan struct{}, 1)
	s := &Serve{
		Binding: b, Store: testStore, NotifyTasks: true, Secrets: []string{secret}, News: news, Log: logr.Discard(),
		NewAdapter: func() (Adapter, error) {
			mu.Lock()
			defer mu.Unlock()
			a := runs[0]
			if len(runs) > 1 {
				runs = runs[1:]
			}
			return a, nil
		},
		OnStatus: func(st Status) {
			mu.Lock()
			defer mu.Unlock()
			statuses = append(statuses, st.State+" "+st.Detail)
		},
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	// The second run's message reaches the Dot; its answer goes back to
	// the chat at the news.
	var asked store.Event
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		events, _ := testStore.EventsAfter(ctx, b.Dot.UID, 0, 100)
		if len(events) > 0 && events[len(events)-1].Type == "message.user" {
			asked = events[len(events)-1]
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if asked.ID == 0 {
		t.Fatal("the message of the restarted link did not reach the Dot")
	}
	guestSays(t, b.Dot, "message.assistant", map[string]any{"text": "yes, here", "in_reply_to": store.MessageID(asked.ID)})
	news <- struct{}{}
	second := runs[0]
	var sent []string
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(strings.Join(sent, "|"), "42: yes, here") {
		time.Sleep(20 * time.Millisecond)
		sent = append(sent, second.take()...)
	}
	if !strings.Contains(strings.Join(sent, "|"), "42: yes, here") {
		t.Errorf("the answer was not sent to the chat at the news: %v", sent)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v", err)
	}
	mu.Lock()
	got := strings.Join(statuses, "\n")
	mu.Unlock()
	want := "connecting \nconnected \nerror Telegram could not be reached: POST https://api.telegram.org/bot***/getUpdates\nconnecting \nconnected "
	if got != want {
		t.Errorf("statuses:\n%s\nwant:\n%s", got, want)
	}

	// A link the channel refuses for good stops until it is linked again.
	relink := &Serve{
		Binding: b, Store: testStore, Log: logr.Discard(), News: make(chan struct{}),
		NewAdapter: func() (Adapter, error) { return &scriptedAdapter{end: channels.ErrNeedsRelink}, nil },
		OnStatus: func(st Status) {
			mu.Lock()
			defer mu.Unlock()
			statuses = append(statuses, st.State)
		},
	}
	if err := relink.Run(context.Background()); !errors.Is(err, channels.ErrNeedsRelink) {
		t.Errorf("a refused link: %v; want ErrNeedsRelink", err)
	}
	if last := statuses[len(statuses)-1]; last != StateNeedsRelink {
		t.Errorf("the last status of a refused link: %s", last)
	}
}

// timedSender records when each send was tried; the first fails with the
// channel's retry_after.
type timedSender struct {
	recordingSender
	mu    sync.Mutex
	tries []time.Time
	after time.Duration
}

func (s *timedSender) SendText(ctx context.Context, chat, text string) error {
	s.mu.Lock()
	s.tries = append(s.tries, time.Now())
	first := len(s.tries) == 1
	s.mu.Unlock()
	if first {
		return &channels.RetryAfterError{After: s.after}
	}
	return s.recordingSender.SendText(ctx, chat, text)
}

func TestTheWayOutWaitsWhatTheChannelAsks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, _ := newInbound(t)
	b, dot := in.Binding, in.Binding.Dot
	code, hash := channels.NewPairingCode()
	_ = testStore.AddPairingCode(ctx, b.UID, dot.UID, hash, time.Now().Add(time.Minute))
	send := &timedSender{after: 2500 * time.Millisecond}
	out := &Outbound{Binding: b, Store: testStore, Send: send, NotifyTasks: true, Log: logr.Discard()}
	out.Prompts = &Prompts{Binding: b, Store: testStore, Send: send, Log: logr.Discard()}
	if err := out.Step(ctx); err != nil { // the cursor starts here
		t.Fatal(err)
	}
	if err := in.Inbound(ctx, msg("42", "42", true, "777:1", "/start "+code)); err != nil {
		t.Fatal(err)
	}
	guestSays(t, dot, "task.completed", map[string]any{"task_id": "t1", "summary": "done"})
	s := &Serve{Binding: b, Store: testStore, Log: logr.Discard()}
	go s.stepOut(ctx, out, make(chan struct{}))
	deadline := time.Now().Add(10 * time.Second)
	for len(send.take()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	send.mu.Lock()
	defer send.mu.Unlock()
	if len(send.tries) != 2 {
		t.Fatalf("%d tries; want the send refused with retry_after, then sent", len(send.tries))
	}
	if waited := send.tries[1].Sub(send.tries[0]); waited < send.after {
		t.Errorf("the send was tried again after %s; the channel asked for %s", waited, send.after)
	}
}
