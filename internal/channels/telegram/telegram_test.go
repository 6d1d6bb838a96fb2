package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/channels/telegram/telegramtest"
)

const token = "123456:SECRET-token-of-the-bot"

// newFake is Telegram's Bot API for one test: telegramtest's fake, at the
// edge of the test.
func newFake(t *testing.T) (*telegramtest.FakeBotAPI, string) {
	f := telegramtest.New(token)
	t.Cleanup(f.Close)
	return f, f.URL()
}

// recordingSink stands in for the hub: it records what it was given, and
// fails on one external id.
type recordingSink struct {
	mu      sync.Mutex
	inbound []channels.Inbound
	presses []channels.Press
	failOn  string
	seen    chan struct{}
}

func (s *recordingSink) Connected() {}

func (s *recordingSink) Inbound(_ context.Context, in channels.Inbound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.ExternalID == s.failOn {
		return errors.New("the hub could not store it")
	}
	s.inbound = append(s.inbound, in)
	s.seen <- struct{}{}
	return nil
}

func (s *recordingSink) Pressed(_ context.Context, p channels.Press) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.presses = append(s.presses, p)
	s.seen <- struct{}{}
	return "Approved.", nil
}

func TestCheck(t *testing.T) {
	_, api := newFake(t)
	ctx := context.Background()
	acct, err := Check(ctx, token, api)
	if err != nil || acct != (channels.Account{ID: "123456", Name: "dots_test_bot"}) {
		t.Fatalf("Check = %+v, %v; want the bot's id and name", acct, err)
	}
	_, err = Check(ctx, "999:not-the-token", api)
	if !errors.Is(err, channels.ErrInvalidCredentials) || strings.Contains(err.Error(), "not-the-token") {
		t.Errorf("Check of a wrong token: %v; want ErrInvalidCredentials without the token", err)
	}
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	_, err = Check(ctx, token, gone.URL)
	if err == nil || errors.Is(err, channels.ErrInvalidCredentials) || strings.Contains(err.Error(), token) {
		t.Errorf("Check with Telegram unreachable: %v; want an error that is not a refusal and holds no token", err)
	}
}

func TestRunConfirmsAnUpdateOnlyAfterTheHub(t *testing.T) {
	f, api := newFake(t)
	hello := f.Say(42, "Ada", "hello")
	f.SayInGroup(43, -5, "hi all")
	second := f.Say(42, "Ada", "second")
	f.Press(42, 9, "ap1:y:appr_1")
	a, err := New(token, api, channels.Account{ID: "777"})
	if err != nil {
		t.Fatal(err)
	}
	// The hub cannot store the second message: the adapter stops there.
	sink := &recordingSink{failOn: fmt.Sprintf("777:%d", second), seen: make(chan struct{}, 10)}
	err = a.Run(context.Background(), sink)
	if err == nil || strings.Contains(err.Error(), token) {
		t.Fatalf("Run with a failing hub: %v; want its error, without the token", err)
	}
	if got := len(sink.inbound); got != 2 || sink.inbound[0].Text != "hello" || !sink.inbound[0].Private || sink.inbound[1].Private ||
		sink.inbound[0].Peer != "42" || sink.inbound[0].ExternalID != fmt.Sprintf("777:%d", hello) {
		t.Fatalf("the hub was given %+v; want hello (private, from 42, 777:%d) and the group's message (not private)", sink.inbound, hello)
	}
	if len(f.Calls("deleteWebhook")) != 1 {
		t.Errorf("the webhook was not deleted on connect")
	}
	if got := f.Calls("getUpdates")[0].Fields["allowed_updates"]; got != `["message","callback_query"]` {
		t.Errorf("allowed updates %s; want message and callback_query only", got)
	}

	// Started again (by the hub): Telegram is asked from the first
	// update on (nothing was confirmed), and the hub now takes them all.
	a2, _ := New(token, api, channels.Account{ID: "777"})
	sink.failOn = ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a2.Run(ctx, sink) }()
	for range 4 { // the two again (unconfirmed by a restart), the second, the press
		select {
		case <-sink.seen:
		case <-time.After(5 * time.Second):
			t.Fatal("the hub was not given the updates after the restart")
		}
	}
	// The press is answered to Telegram with the hub's notice.
	deadline := time.Now().Add(5 * time.Second)
	for len(f.Calls("answerCallbackQuery")) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Everything dealt with is confirmed at the next poll.
	for f.Pending() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v; want nil", err)
	}
	answers := f.Calls("answerCallbackQuery")
	if len(answers) != 1 || answers[0].Field("text") != "Approved." || answers[0].Field("callback_query_id") == "" {
		t.Errorf("the press's answer: %+v; want the hub's notice", answers)
	}
	if p := sink.presses; len(p) != 1 || p[0].Data != "ap1:y:appr_1" || p[0].Peer != "42" || p[0].Chat != "42" || !p[0].Private {
		t.Errorf("the press the hub got: %+v", p)
	}
	// The first run confirmed nothing (asked from 0, failed before its
	// next poll); the second from 0 again, then past the press.
	var offsets []string
	for _, c := range f.Calls("getUpdates") {
		offsets = append(offsets, c.Fields["offset"])
	}
	if got := strings.Join(offsets, " "); !strings.HasPrefix(got, "0 0 ") || f.Pending() != 0 {
		t.Errorf("getUpdates offsets %s (%d left); want the failed update unconfirmed and the rest confirmed after the hub", got, f.Pending())
	}
}

func TestSendsNeverPreviewALink(t *testing.T) {
	f, api := newFake(t)
	a, _ := New(token, api, channels.Account{ID: "777"})
	ctx := context.Background()
	long := strings.Repeat("see https://example.com/?q=1 ", 200) // 5800 characters
	if err := a.SendText(ctx, "42", long); err != nil {
		t.Fatal(err)
	}
	ref, err := a.SendApproval(ctx, "42", "Ada's Dot wants to run: ls", "appr_1")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EditApproval(ctx, "42", ref, "Approved by Ada."); err != nil {
		t.Fatal(err)
	}
	if err := a.Typing(ctx, "42"); err != nil {
		t.Fatal(err)
	}
	sends := f.Calls("sendMessage")
	if len(sends) != 3 {
		t.Fatalf("%d sends; want the long text in 2 parts and the prompt", len(sends))
	}
	for _, c := range append(sends, f.Calls("editMessageText")...) {
		if c.Field("link_preview_options") != `{"is_disabled":true}` {
			t.Errorf("%s without link previews off: %q", c.Method, c.Field("link_preview_options"))
		}
		if len([]rune(c.Field("text"))) > MaxText {
			t.Errorf("%s of %d characters", c.Method, len([]rune(c.Field("text"))))
		}
	}
	if m := sends[2].Field("reply_markup"); !strings.Contains(m, `"callback_data":"ap1:y:appr_1"`) || !strings.Contains(m, `"callback_data":"ap1:n:appr_1"`) {
		t.Errorf("the prompt's buttons: %s", m)
	}
	edit := f.Calls("editMessageText")
	if len(edit) != 1 || edit[0].Field("message_id") != ref || edit[0].Field("reply_markup") != `{"inline_keyboard":[]}` {
		t.Errorf("the edit: %+v; want message %s with its buttons taken away", edit, ref)
	}
}

func TestFailuresAreWordedForTheHub(t *testing.T) {
	f, api := newFake(t)
	a, _ := New(token, api, channels.Account{ID: "777"})
	ctx := context.Background()

	f.Fail("sendMessage", http.StatusForbidden, 0) // the person blocked the bot
	if err := a.SendText(ctx, "42", "hi"); !errors.Is(err, channels.ErrRefused) {
		t.Errorf("a 403 on send: %v; want ErrRefused", err)
	}
	f.Fail("sendMessage", http.StatusTooManyRequests, 7)
	var wait *channels.RetryAfterError
	if err := a.SendText(ctx, "42", "hi"); !errors.As(err, &wait) || wait.After != 7*time.Second {
		t.Errorf("a 429 on send: %v; want RetryAfterError of 7 s", err)
	}
	f.Fail("sendMessage", http.StatusInternalServerError, 0)
	if err := a.SendText(ctx, "42", "hi"); err == nil || errors.Is(err, channels.ErrRefused) || strings.Contains(err.Error(), token) {
		t.Errorf("a 500 on send: %v; want a retried error without the token", err)
	}
	f.Fail("getUpdates", http.StatusConflict, 0)
	if err := a.Run(ctx, &recordingSink{seen: make(chan struct{}, 1)}); !errors.Is(err, channels.ErrAnotherPoller) {
		t.Errorf("a 409 on getUpdates: %v; want ErrAnotherPoller", err)
	}
	revoked, _ := New("123456:revoked", api, channels.Account{ID: "777"})
	err := revoked.Run(ctx, &recordingSink{seen: make(chan struct{}, 1)})
	if !errors.Is(err, channels.ErrNeedsRelink) || strings.Contains(err.Error(), "revoked") {
		t.Errorf("a revoked token: %v; want ErrNeedsRelink without the token", err)
	}
}
