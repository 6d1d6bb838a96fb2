package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/channels"
)

const token = "123456:SECRET-token-of-the-bot"

// fakeBotAPI stands in for Telegram's Bot API at the edge of these tests:
// it speaks the Bot API's JSON for the calls the adapter makes, and records
// every call.
type fakeBotAPI struct {
	mu      sync.Mutex
	calls   []call
	updates []map[string]any
	// offsets are the getUpdates offsets asked, in order.
	offsets []int64
	allowed []string
	// fail answers the next call of a method with this error code (and
	// retry_after for 429).
	fail       map[string]int
	retryAfter int
	nextID     int
}

type call struct {
	method string
	fields map[string]string
}

func (f *fakeBotAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	tok, method, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/bot"), "/")
	if !ok || tok != token {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"ok":false,"error_code":401,"description":"Unauthorized"}`))
		return
	}
	fields := map[string]string{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		for k, v := range m {
			b, _ := json.Marshal(v)
			fields[k] = string(b)
		}
	} else if err := r.ParseMultipartForm(1 << 20); err == nil {
		for k, v := range r.MultipartForm.Value {
			fields[k] = v[0]
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{method, fields})
	code := f.fail[method]
	delete(f.fail, method)
	f.mu.Unlock()
	if code != 0 {
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"ok":false,"error_code":%d,"description":"refused by the fake","parameters":{"retry_after":%d}}`, code, f.retryAfter)
		return
	}
	switch method {
	case "getMe":
		_, _ = w.Write([]byte(`{"ok":true,"result":{"id":777,"is_bot":true,"first_name":"Dots","username":"dots_bot"}}`))
	case "deleteWebhook", "sendChatAction", "answerCallbackQuery":
		_, _ = w.Write([]byte(`{"ok":true,"result":true}`))
	case "getUpdates":
		var offset int64
		_ = json.Unmarshal([]byte(fields["offset"]), &offset)
		_ = json.Unmarshal([]byte(fields["allowed_updates"]), &f.allowed)
		f.mu.Lock()
		f.offsets = append(f.offsets, offset)
		var out []map[string]any
		for _, u := range f.updates {
			if int64(u["update_id"].(int)) >= offset {
				out = append(out, u)
			}
		}
		f.mu.Unlock()
		if len(out) == 0 {
			// A long poll with no news, made short.
			select {
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		b, _ := json.Marshal(map[string]any{"ok": true, "result": out})
		_, _ = w.Write(b)
	case "sendMessage", "editMessageText":
		f.mu.Lock()
		f.nextID++
		id := f.nextID
		f.mu.Unlock()
		fmt.Fprintf(w, `{"ok":true,"result":{"message_id":%d,"date":1,"chat":{"id":%s,"type":"private"},"text":"x"}}`, id, fields["chat_id"])
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"ok":false,"error_code":404,"description":"Not Found"}`))
	}
}

func (f *fakeBotAPI) callsOf(method string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.method == method {
			out = append(out, c)
		}
	}
	return out
}

func newFake(t *testing.T) (*fakeBotAPI, string) {
	f := &fakeBotAPI{fail: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func message(update int, from int64, chat int64, chatType, text string) map[string]any {
	return map[string]any{"update_id": update, "message": map[string]any{
		"message_id": update, "date": 1, "text": text,
		"from": map[string]any{"id": from, "is_bot": false, "first_name": "Ada"},
		"chat": map[string]any{"id": chat, "type": chatType},
	}}
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
	if err != nil || acct != (channels.Account{ID: "777", Name: "dots_bot"}) {
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
	f.updates = []map[string]any{
		message(100, 42, 42, "private", "hello"),
		message(101, 43, -5, "group", "hi all"),
		message(102, 42, 42, "private", "second"),
		{"update_id": 103, "callback_query": map[string]any{
			"id": "cq1", "data": "ap1:y:appr_1", "from": map[string]any{"id": 42, "is_bot": false, "first_name": "Ada"},
			"message": map[string]any{"message_id": 9, "date": 1, "chat": map[string]any{"id": 42, "type": "private"}},
		}},
	}
	a, err := New(token, api, channels.Account{ID: "777"})
	if err != nil {
		t.Fatal(err)
	}
	// The hub cannot store update 102: the adapter stops there.
	sink := &recordingSink{failOn: "777:102", seen: make(chan struct{}, 10)}
	err = a.Run(context.Background(), sink)
	if err == nil || strings.Contains(err.Error(), token) {
		t.Fatalf("Run with a failing hub: %v; want its error, without the token", err)
	}
	if got := len(sink.inbound); got != 2 || sink.inbound[0].Text != "hello" || !sink.inbound[0].Private || sink.inbound[1].Private || sink.inbound[0].Peer != "42" || sink.inbound[0].ExternalID != "777:100" {
		t.Fatalf("the hub was given %+v; want hello (private, from 42, 777:100) and the group's message (not private)", sink.inbound)
	}
	if len(f.callsOf("deleteWebhook")) != 1 {
		t.Errorf("the webhook was not deleted on connect")
	}
	if strings.Join(f.allowed, ",") != "message,callback_query" {
		t.Errorf("allowed updates %v; want message and callback_query only", f.allowed)
	}

	// Started again (by the hub): Telegram is asked from update 102 on,
	// which the hub now takes, and then the press.
	a2, _ := New(token, api, channels.Account{ID: "777"})
	a2.offset = 0 // a restart knows no offset: Telegram keeps it
	sink.failOn = ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a2.Run(ctx, sink) }()
	for range 4 { // 100 and 101 again (unconfirmed by a restart), 102, the press
		select {
		case <-sink.seen:
		case <-time.After(5 * time.Second):
			t.Fatal("the hub was not given the updates after the restart")
		}
	}
	// The press is answered to Telegram with the hub's notice.
	deadline := time.Now().Add(5 * time.Second)
	for len(f.callsOf("answerCallbackQuery")) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v; want nil", err)
	}
	answers := f.callsOf("answerCallbackQuery")
	if len(answers) != 1 || answers[0].fields["text"] != "Approved." || answers[0].fields["callback_query_id"] != "cq1" {
		t.Errorf("the press's answer: %+v; want the hub's notice for cq1", answers)
	}
	if p := sink.presses; len(p) != 1 || p[0].Data != "ap1:y:appr_1" || p[0].Peer != "42" || p[0].Chat != "42" || !p[0].Private {
		t.Errorf("the press the hub got: %+v", p)
	}
	// The first run confirmed 100 and 101 only (asked from 0, then 102);
	// the second from 0 (the fake's memory of no offset), then past 103.
	f.mu.Lock()
	offsets := fmt.Sprint(f.offsets)
	f.mu.Unlock()
	if !strings.HasPrefix(offsets, "[0 0 ") || !strings.Contains(offsets, " 104") {
		t.Errorf("getUpdates offsets %s; want the failed update unconfirmed and the rest confirmed after the hub", offsets)
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
	sends := f.callsOf("sendMessage")
	if len(sends) != 3 {
		t.Fatalf("%d sends; want the long text in 2 parts and the prompt", len(sends))
	}
	for _, c := range append(sends, f.callsOf("editMessageText")...) {
		if c.fields["link_preview_options"] != `{"is_disabled":true}` {
			t.Errorf("%s without link previews off: %q", c.method, c.fields["link_preview_options"])
		}
		if len([]rune(c.fields["text"])) > MaxText {
			t.Errorf("%s of %d characters", c.method, len([]rune(c.fields["text"])))
		}
	}
	if m := sends[2].fields["reply_markup"]; !strings.Contains(m, `"callback_data":"ap1:y:appr_1"`) || !strings.Contains(m, `"callback_data":"ap1:n:appr_1"`) {
		t.Errorf("the prompt's buttons: %s", m)
	}
	edit := f.callsOf("editMessageText")
	if len(edit) != 1 || edit[0].fields["message_id"] != ref || edit[0].fields["reply_markup"] != `{"inline_keyboard":[]}` {
		t.Errorf("the edit: %+v; want message %s with its buttons taken away", edit, ref)
	}
}

func TestFailuresAreWordedForTheHub(t *testing.T) {
	f, api := newFake(t)
	a, _ := New(token, api, channels.Account{ID: "777"})
	ctx := context.Background()

	f.fail["sendMessage"] = http.StatusForbidden // the person blocked the bot
	if err := a.SendText(ctx, "42", "hi"); !errors.Is(err, channels.ErrRefused) {
		t.Errorf("a 403 on send: %v; want ErrRefused", err)
	}
	f.fail["sendMessage"], f.retryAfter = http.StatusTooManyRequests, 7
	var wait *channels.RetryAfterError
	if err := a.SendText(ctx, "42", "hi"); !errors.As(err, &wait) || wait.After != 7*time.Second {
		t.Errorf("a 429 on send: %v; want RetryAfterError of 7 s", err)
	}
	f.fail["sendMessage"] = http.StatusInternalServerError
	if err := a.SendText(ctx, "42", "hi"); err == nil || errors.Is(err, channels.ErrRefused) || strings.Contains(err.Error(), token) {
		t.Errorf("a 500 on send: %v; want a retried error without the token", err)
	}
	f.fail["getUpdates"] = http.StatusConflict
	if err := a.Run(ctx, &recordingSink{seen: make(chan struct{}, 1)}); !errors.Is(err, channels.ErrAnotherPoller) {
		t.Errorf("a 409 on getUpdates: %v; want ErrAnotherPoller", err)
	}
	revoked, _ := New("123456:revoked", api, channels.Account{ID: "777"})
	err := revoked.Run(ctx, &recordingSink{seen: make(chan struct{}, 1)})
	if !errors.Is(err, channels.ErrNeedsRelink) || strings.Contains(err.Error(), "revoked") {
		t.Errorf("a revoked token: %v; want ErrNeedsRelink without the token", err)
	}
}
