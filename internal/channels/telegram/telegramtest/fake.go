// Package telegramtest is a fake of Telegram's Bot API for tests at the
// edge of the product (the integration and e2e suites): an HTTP server that
// speaks the Bot API's JSON for the calls the Telegram adapter makes, keeps
// the updates a test gives it until the adapter confirms them, and records
// every call. Nothing in the product uses it.
package telegramtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Call is one call the fake answered.
type Call struct {
	Method string
	// Fields are the call's parameters, each as its JSON text.
	Fields map[string]string
	At     time.Time
}

// Field is a parameter as a Go string (a JSON string unquoted).
func (c Call) Field(name string) string {
	v := c.Fields[name]
	var s string
	if json.Unmarshal([]byte(v), &s) == nil {
		return s
	}
	return v
}

// FakeBotAPI is the fake. Its zero value is not usable: use New.
type FakeBotAPI struct {
	Server   *httptest.Server
	Token    string
	BotID    int64
	Username string

	mu      sync.Mutex
	updates []map[string]any
	next    int64
	calls   []Call
	revoked bool
	fail    map[string][2]int
	msgID   int
	wake    chan struct{}
}

// New starts a fake of the bot token (id:secret, as @BotFather gives).
func New(token string) *FakeBotAPI {
	f := &FakeBotAPI{Token: token, BotID: 777, Username: "dots_test_bot", next: 1, fail: map[string][2]int{}, wake: make(chan struct{})}
	if id, _, ok := strings.Cut(token, ":"); ok {
		_, _ = fmt.Sscan(id, &f.BotID)
	}
	f.Server = httptest.NewServer(f)
	return f
}

// URL is the base URL to give the server (INVISIBLE_DOTS_TELEGRAM_API).
func (f *FakeBotAPI) URL() string { return f.Server.URL }

// Close stops the fake.
func (f *FakeBotAPI) Close() { f.Server.Close() }

// offer adds an update and wakes a long poll.
func (f *FakeBotAPI) offer(u map[string]any) int64 {
	f.mu.Lock()
	id := f.next
	f.next++
	u["update_id"] = id
	f.updates = append(f.updates, u)
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
	return id
}

// Say is a text message from the person from in their private chat with
// the bot (chat id = user id, as Telegram does); it returns the update id.
func (f *FakeBotAPI) Say(from int64, name, text string) int64 {
	return f.offer(map[string]any{"message": message(from, name, from, "private", text)})
}

// SayInGroup is a message from from in a group chat.
func (f *FakeBotAPI) SayInGroup(from int64, group int64, text string) int64 {
	return f.offer(map[string]any{"message": message(from, "someone", group, "group", text)})
}

// SendPhoto is a message without text from from in their private chat.
func (f *FakeBotAPI) SendPhoto(from int64) int64 {
	m := message(from, "someone", from, "private", "")
	delete(m, "text")
	m["photo"] = []map[string]any{{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}}
	return f.offer(map[string]any{"message": m})
}

// Press is from pressing a button with data under the bot's message msg in
// their private chat; it returns the update id.
func (f *FakeBotAPI) Press(from int64, msg int, data string) int64 {
	return f.offer(map[string]any{"callback_query": map[string]any{
		"id": fmt.Sprintf("cb-%d-%d", from, time.Now().UnixNano()), "from": user(from, "someone"), "chat_instance": "ci",
		"data": data, "message": map[string]any{"message_id": msg, "date": 1, "chat": map[string]any{"id": from, "type": "private"}},
	}})
}

func user(id int64, name string) map[string]any {
	return map[string]any{"id": id, "is_bot": false, "first_name": name}
}

func message(from int64, name string, chat int64, kind, text string) map[string]any {
	return map[string]any{
		"message_id": time.Now().Nanosecond(), "date": time.Now().Unix(), "from": user(from, name),
		"chat": map[string]any{"id": chat, "type": kind}, "text": text,
	}
}

// Revoke makes the token one Telegram no longer accepts (401 to every call).
func (f *FakeBotAPI) Revoke() {
	f.mu.Lock()
	f.revoked = true
	f.mu.Unlock()
}

// Fail answers the next call of method with the HTTP status code (and, for
// 429, retry_after seconds).
func (f *FakeBotAPI) Fail(method string, code, retryAfter int) {
	f.mu.Lock()
	f.fail[method] = [2]int{code, retryAfter}
	f.mu.Unlock()
}

// Calls are the calls of method so far (every call when method is "").
func (f *FakeBotAPI) Calls(method string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Pending are the updates not confirmed yet.
func (f *FakeBotAPI) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.updates)
}

// ServeHTTP answers one Bot API call.
func (f *FakeBotAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	tok, method, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/bot"), "/")
	f.mu.Lock()
	revoked := f.revoked
	f.mu.Unlock()
	if !ok || tok != f.Token || revoked {
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
	} else if err := r.ParseForm(); err == nil {
		for k, v := range r.Form {
			fields[k] = v[0]
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, Call{Method: method, Fields: fields, At: time.Now()})
	failure, failing := f.fail[method]
	delete(f.fail, method)
	f.mu.Unlock()
	if failing {
		w.WriteHeader(failure[0])
		fmt.Fprintf(w, `{"ok":false,"error_code":%d,"description":"refused by the fake","parameters":{"retry_after":%d}}`, failure[0], failure[1])
		return
	}
	switch method {
	case "getMe":
		fmt.Fprintf(w, `{"ok":true,"result":{"id":%d,"is_bot":true,"first_name":"Dot","username":%q}}`, f.BotID, f.Username)
	case "deleteWebhook", "sendChatAction", "answerCallbackQuery":
		_, _ = w.Write([]byte(`{"ok":true,"result":true}`))
	case "getUpdates":
		f.getUpdates(w, r.Context(), fields)
	case "sendMessage", "editMessageText":
		f.mu.Lock()
		f.msgID++
		id := f.msgID
		f.mu.Unlock()
		if m := fields["message_id"]; method == "editMessageText" && m != "" {
			_, _ = fmt.Sscan(m, &id)
		}
		fmt.Fprintf(w, `{"ok":true,"result":{"message_id":%d,"date":1,"chat":{"id":%s,"type":"private"},"text":"x"}}`, id, fields["chat_id"])
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"ok":false,"error_code":404,"description":"Not Found"}`))
	}
}

// maxPoll bounds a long poll here, so a test's server stops quickly.
const maxPoll = time.Second

// getUpdates confirms the updates before offset, then answers those left,
// waiting up to the poll's timeout (at most maxPoll) for one.
func (f *FakeBotAPI) getUpdates(w http.ResponseWriter, ctx context.Context, fields map[string]string) {
	var offset int64
	_ = json.Unmarshal([]byte(fields["offset"]), &offset)
	deadline := time.After(maxPoll)
	for {
		f.mu.Lock()
		kept := f.updates[:0]
		for _, u := range f.updates {
			if u["update_id"].(int64) >= offset {
				kept = append(kept, u)
			}
		}
		f.updates = kept
		out := append([]map[string]any(nil), kept...)
		wake := f.wake
		f.mu.Unlock()
		if len(out) > 0 {
			b, _ := json.Marshal(map[string]any{"ok": true, "result": out})
			_, _ = w.Write(b)
			return
		}
		select {
		case <-wake:
		case <-deadline:
			_, _ = w.Write([]byte(`{"ok":true,"result":[]}`))
			return
		case <-ctx.Done():
			return
		}
	}
}

// Restore makes the token accepted again (after Revoke).
func (f *FakeBotAPI) Restore() {
	f.mu.Lock()
	f.revoked = false
	f.mu.Unlock()
}
