package dotsapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

func TestNewestUserText(t *testing.T) {
	msg := func(role, content string) wire.OpenAIChatMessage {
		return wire.OpenAIChatMessage{Role: role, Content: json.RawMessage(content)}
	}
	type want struct {
		Text, Code, Param string
	}
	tests := map[string]struct {
		reason   string
		messages []wire.OpenAIChatMessage
		want     want
	}{
		"string": {
			reason:   "a string content is said as it is",
			messages: []wire.OpenAIChatMessage{msg("user", `"hello"`)},
			want:     want{Text: "hello"},
		},
		"newest user message alone": {
			reason: "the history is the client's; the newest user message is what the Dot is told, whatever follows it",
			messages: []wire.OpenAIChatMessage{msg("system", `"be brief"`), msg("user", `"old"`), msg("assistant", `"old answer"`),
				msg("user", `"new"`), msg("tool", `"a result"`)},
			want: want{Text: "new"},
		},
		"text parts": {
			reason:   "text parts are joined by line breaks",
			messages: []wire.OpenAIChatMessage{msg("user", `[{"type":"text","text":"one"},{"type":"text","text":"two"}]`)},
			want:     want{Text: "one\ntwo"},
		},
		"an image": {
			reason:   "a part that is not text is refused, naming it",
			messages: []wire.OpenAIChatMessage{msg("user", `"old"`), msg("user", `[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]`)},
			want:     want{Code: wire.OpenAICodeUnsupportedContent, Param: "messages[1].content[1]"},
		},
		"no user message": {
			reason:   "a request of system messages alone says nothing",
			messages: []wire.OpenAIChatMessage{msg("system", `"rules"`)},
			want:     want{Code: wire.OpenAICodeNoUserMessage, Param: "messages"},
		},
		"empty": {
			reason:   "a message needs words",
			messages: []wire.OpenAIChatMessage{msg("user", `"  "`)},
			want:     want{Code: wire.CodeInvalidRequest, Param: "messages[0].content"},
		},
		"null content": {
			reason:   "content is a string or an array",
			messages: []wire.OpenAIChatMessage{msg("user", `null`)},
			want:     want{Code: wire.CodeInvalidRequest, Param: "messages[0].content"},
		},
		"too long": {
			reason:   "a message holds at most what the Dots API's chat takes",
			messages: []wire.OpenAIChatMessage{msg("user", `"`+strings.Repeat("a", wire.MaxMessageBody+1)+`"`)},
			want:     want{Code: wire.CodeTooLarge, Param: "messages[0].content"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			text, err := newestUserText(tc.messages)
			got := want{Text: text}
			var oe *openAIError
			if errors.As(err, &oe) {
				got.Code, got.Param = oe.code, oe.param
			} else if err != nil {
				t.Fatalf("not an OpenAI error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nnewestUserText(%d messages) (-want +got):\n%s", tc.reason, len(tc.messages), diff)
			}
		})
	}
}

// openAIServer serves the env's handler's OpenAI-compatible endpoint, with
// the env's people.
func openAIServer(t testing.TB, e *env) *httptest.Server {
	t.Helper()
	h := (*e.current.Load()).(*Handler).OpenAI()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := users[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]; ok {
			r = r.WithContext(request.WithUser(r.Context(), u))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func callOpenAI(t *testing.T, srv *httptest.Server, who, method, path, body string) (int, []byte, http.Header) {
	t.Helper()
	status, data, header, err := doOpenAI(srv, who, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, data, header
}

// doOpenAI sends a request as who and returns the answer's status, body
// and header.
func doOpenAI(srv *httptest.Server, who, method, path, body string) (int, []byte, http.Header, error) {
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+who)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, resp.Header, err
}

func TestOpenAIModels(t *testing.T) {
	srv := openAIServer(t, newEnv(t))
	tests := map[string]struct {
		reason string
		who    string
		want   []string
	}{
		"editor": {
			reason: "an editor of team-a chats with its Dots, not one being deleted, and sees nothing of team-b",
			who:    "editor",
			want:   []string{"team-a/far", "team-a/helper", "team-a/stray", "team-a/unplaced"},
		},
		"viewer": {reason: "a viewer may not chat: no model", who: "viewer", want: nil},
		"nobody": {reason: "a person with no role has no model", who: "nobody", want: nil},
		"admin": {
			reason: "system:masters chats with every Dot",
			who:    "admin",
			want:   []string{"team-a/far", "team-a/helper", "team-a/stray", "team-a/unplaced", "team-b/helper"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			status, data, _ := callOpenAI(t, srv, tc.who, http.MethodGet, "/v1/models", "")
			if status != http.StatusOK {
				t.Fatalf("GET /v1/models as %s: %d %s", tc.who, status, data)
			}
			var list wire.OpenAIModelList
			if err := json.Unmarshal(data, &list); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range list.Data {
				got = append(got, m.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nGET /v1/models as %s (-want +got):\n%s", tc.reason, tc.who, diff)
			}
		})
	}
}

func TestOpenAIRefusals(t *testing.T) {
	srv := openAIServer(t, newEnv(t))
	chat := func(model, content string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":` + content + `}],"temperature":0.3}`
	}
	type want struct {
		Status      int
		Type, Code  string
		Param       string
		ShouldRetry string
	}
	tests := map[string]struct {
		reason       string
		who          string
		method, path string
		body         string
		want         want
	}{
		"viewer": {
			reason: "a viewer may read the Dot's chat, not say anything in it",
			who:    "viewer", method: http.MethodPost, path: "/v1/chat/completions", body: chat("team-a/helper", `"hi"`),
			want: want{Status: http.StatusForbidden, Type: wire.OpenAITypePermission, Code: wire.CodeForbidden, Param: "model"},
		},
		"another namespace": {
			reason: "a Dot of a namespace the caller has no role in is not found, as one that does not exist",
			who:    "editor", method: http.MethodPost, path: "/v1/chat/completions", body: chat("team-b/helper", `"hi"`),
			want: want{Status: http.StatusNotFound, Type: wire.OpenAITypeInvalidRequest, Code: wire.OpenAICodeModelNotFound, Param: "model"},
		},
		"no such Dot": {
			reason: "a Dot that does not exist",
			who:    "editor", method: http.MethodPost, path: "/v1/chat/completions", body: chat("team-a/ghost", `"hi"`),
			want: want{Status: http.StatusNotFound, Type: wire.OpenAITypeInvalidRequest, Code: wire.OpenAICodeModelNotFound, Param: "model"},
		},
		"not a Dot's name": {
			reason: "OpenAI's own model names are no Dot",
			who:    "editor", method: http.MethodPost, path: "/v1/chat/completions", body: chat("gpt-4o", `"hi"`),
			want: want{Status: http.StatusNotFound, Type: wire.OpenAITypeInvalidRequest, Code: wire.OpenAICodeModelNotFound, Param: "model"},
		},
		"deleting": {
			reason: "a Dot being deleted takes no message; the client is told not to retry",
			who:    "editor", method: http.MethodPost, path: "/v1/chat/completions", body: chat("team-a/leaving", `"hi"`),
			want: want{Status: http.StatusConflict, Type: wire.OpenAITypeInvalidRequest, Code: wire.CodeDotDeleting, Param: "model", ShouldRetry: "false"},
		},
		"n": {
			reason: "a Dot gives one answer",
			who:    "editor", method: http.MethodPost, path: "/v1/chat/completions", body: `{"model":"team-a/helper","n":2,"messages":[{"role":"user","content":"hi"}]}`,
			want: want{Status: http.StatusBadRequest, Type: wire.OpenAITypeInvalidRequest, Code: wire.CodeInvalidRequest, Param: "n"},
		},
		"no model": {
			reason: "model names the Dot",
			who:    "editor", method: http.MethodPost, path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}]}`,
			want: want{Status: http.StatusBadRequest, Type: wire.OpenAITypeInvalidRequest, Code: wire.CodeInvalidRequest, Param: "model"},
		},
		"not JSON": {
			reason: "the body is a JSON object",
			who:    "editor", method: http.MethodPost, path: "/v1/chat/completions", body: `{"model":`,
			want: want{Status: http.StatusBadRequest, Type: wire.OpenAITypeInvalidRequest, Code: wire.CodeInvalidRequest},
		},
		"an image": {
			reason: "a Dot is told text only",
			who:    "editor", method: http.MethodPost, path: "/v1/chat/completions", body: chat("team-a/helper", `[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]`),
			want: want{Status: http.StatusBadRequest, Type: wire.OpenAITypeInvalidRequest, Code: wire.OpenAICodeUnsupportedContent, Param: "messages[0].content[0]"},
		},
		"method": {
			reason: "a chat completion is a POST",
			who:    "editor", method: http.MethodGet, path: "/v1/chat/completions",
			want: want{Status: http.StatusMethodNotAllowed, Type: wire.OpenAITypeInvalidRequest, Code: wire.CodeMethodNotAllowed},
		},
		"route": {
			reason: "the endpoint's other OpenAI routes are not served",
			who:    "editor", method: http.MethodPost, path: "/v1/embeddings", body: `{}`,
			want: want{Status: http.StatusNotFound, Type: wire.OpenAITypeInvalidRequest, Code: wire.CodeNotFound},
		},
		"model of another namespace": {
			reason: "GET of a model hides another namespace's Dot as the chat does",
			who:    "editor", method: http.MethodGet, path: "/v1/models/team-b%2Fhelper",
			want: want{Status: http.StatusNotFound, Type: wire.OpenAITypeInvalidRequest, Code: wire.OpenAICodeModelNotFound, Param: "model"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			status, data, header := callOpenAI(t, srv, tc.who, tc.method, tc.path, tc.body)
			var body wire.OpenAIErrorBody
			if err := json.Unmarshal(data, &body); err != nil {
				t.Fatalf("%s %s: the answer %q is not OpenAI's error: %v", tc.method, tc.path, data, err)
			}
			got := want{Status: status, Type: body.Error.Type, ShouldRetry: header.Get("X-Should-Retry")}
			if body.Error.Code != nil {
				got.Code = *body.Error.Code
			}
			if body.Error.Param != nil {
				got.Param = *body.Error.Param
			}
			if body.Error.Message == "" {
				t.Errorf("%s %s: the error has no message: %s", tc.method, tc.path, data)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\n%s %s as %s (-want +got):\n%s", tc.reason, tc.method, tc.path, tc.who, diff)
			}
		})
	}
}

func TestOpenAIModelByPath(t *testing.T) {
	srv := openAIServer(t, newEnv(t))
	for _, path := range []string{"/v1/models/team-a/helper", "/v1/models/team-a%2Fhelper"} {
		status, data, _ := callOpenAI(t, srv, "editor", http.MethodGet, path, "")
		var m wire.OpenAIModel
		if err := json.Unmarshal(data, &m); err != nil || status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, data)
		}
		if diff := cmp.Diff(wire.OpenAIModel{ID: "team-a/helper", Object: "model", Created: m.Created, OwnedBy: "team-a"}, m); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", path, diff)
		}
	}
}

func TestOpenAIWaitIsBounded(t *testing.T) {
	e := newEnv(t, func(o *Options, _ *FeedOptions) { o.OpenAIMaxWaits, o.OpenAIAnswerWait = 1, 2*time.Second })
	srv := openAIServer(t, e)
	body := `{"model":"team-a/helper","messages":[{"role":"user","content":"is anyone there?"}]}`
	type result struct {
		status int
		data   []byte
		header http.Header
		err    error
	}
	first := make(chan result, 1)
	go func() {
		status, data, header, err := doOpenAI(srv, "editor", http.MethodPost, "/v1/chat/completions", body)
		first <- result{status, data, header, err}
	}()
	// The first waits for an answer that does not come.
	d := e.dots["team-a/helper"]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		said, err := testStore.Events(t.Context(), store.EventQuery{DotUID: d.UID, Types: []string{wire.EventMessageUser}, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(said) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first message was not said within 10 s")
		}
	}
	status, data, header := callOpenAI(t, srv, "editor", http.MethodPost, "/v1/chat/completions", body)
	if status != http.StatusTooManyRequests || header.Get("Retry-After") == "" || !strings.Contains(string(data), wire.OpenAICodeRateLimit) {
		t.Errorf("a second wait beyond the most: %d %s (Retry-After %q), want 429 %s", status, data, header.Get("Retry-After"), wire.OpenAICodeRateLimit)
	}
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.status != http.StatusGatewayTimeout || r.header.Get("X-Should-Retry") != "false" || !strings.Contains(string(r.data), wire.OpenAICodeAnswerTimeout) {
		t.Errorf("a wait past its bound: %d %s (X-Should-Retry %q), want 504 %s and no retry", r.status, r.data, r.header.Get("X-Should-Retry"), wire.OpenAICodeAnswerTimeout)
	}
}

func TestApprovalText(t *testing.T) {
	d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: "family", Name: "helper"}}
	ar := protocol.ApprovalRequested{ApprovalID: "req-1", Tool: "exec", Permission: "computer.exec", Arguments: json.RawMessage(`{"command":"make"}`), Reason: "build it"}
	name := dotsv1.ApprovalName("helper", "req-1")
	tests := map[string]struct {
		reason string
		webURL string
		want   []string
		absent []string
	}{
		"with the web client": {
			reason: "the Inbox is named where the server serves the web client",
			webURL: "http://127.0.0.2:3000/",
			want:   []string{"helper waits for an approval", "build it", name, "http://127.0.0.2:3000/inbox", "invisible-dots approve " + name + " -n family", "kubectl patch approval " + name + " -n family"},
		},
		"without": {
			reason: "no web client (--no-web): the commands alone",
			want:   []string{name, "invisible-dots approve " + name + " -n family"},
			absent: []string{"Inbox"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := approvalText(d, ar, tc.webURL)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%s\napprovalText(web %q) = %q, want it to say %q", tc.reason, tc.webURL, got, w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("%s\napprovalText(web %q) = %q, want no %q", tc.reason, tc.webURL, got, a)
				}
			}
		})
	}
}
