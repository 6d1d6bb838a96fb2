package openrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

const testKey = "sk-or-v1-secret-test-key-0123456789"

// fakeOpenRouter is a stand-in OpenRouter: each request to
// /chat/completions takes the next scripted answer.
type fakeOpenRouter struct {
	t       *testing.T
	mu      sync.Mutex
	answers []func(w http.ResponseWriter, r *http.Request)
	bodies  []map[string]any
	headers []http.Header
	paths   []string
}

func (f *fakeOpenRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.EscapedPath())
	f.headers = append(f.headers, r.Header.Clone())
	var body map[string]any
	if r.Body != nil {
		raw, _ := io.ReadAll(r.Body)
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &body); err != nil {
				f.t.Errorf("request body is not JSON: %v", err)
			}
		}
	}
	f.bodies = append(f.bodies, body)
	if len(f.answers) == 0 {
		f.mu.Unlock()
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
		http.Error(w, "no answer scripted", 500)
		return
	}
	answer := f.answers[0]
	f.answers = f.answers[1:]
	f.mu.Unlock()
	answer(w, r)
}

func (f *fakeOpenRouter) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

// sse answers with the given chunks as server-sent events, then [DONE].
func sse(chunks ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, ": OPENROUTER PROCESSING\n\n")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
			fl.Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// cut answers with the chunks and then drops the connection.
func cut(chunks ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		w.(http.Flusher).Flush()
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err == nil {
			buf.Flush()
			conn.Close()
		}
	}
}

func status(code int, retryAfter, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}
}

type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func newTest(t *testing.T, answers ...func(http.ResponseWriter, *http.Request)) (*Client, *fakeOpenRouter, *sleeps) {
	t.Helper()
	f := &fakeOpenRouter{t: t, answers: answers}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c := New(srv.URL+"/api/v1", srv.Client())
	s := &sleeps{}
	c.Sleep = s.sleep
	c.Jitter = func(time.Duration) time.Duration { return 0 }
	return c, f, s
}

const (
	chunkText1 = `{"provider":"Fake","choices":[{"delta":{"role":"assistant","content":"Let me "}}]}`
	chunkText2 = `{"choices":[{"delta":{"content":"look."}}]}`
	// Two calls, each split across deltas, the second interleaved.
	chunkCall0a = `{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_0","type":"function","function":{"name":"read_file","arguments":""}}]}}]}`
	chunkCall0b = `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}`
	chunkCall1a = `{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"exec","arguments":"{\"comm"}}]}}]}`
	chunkCall0c = `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.txt\"}"}}]}}]}`
	chunkCall1b = `{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"and\":\"ls\"}"}}]}}]}`
	chunkFinish = `{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`
	chunkUsage  = `{"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"cost":0.00042}}`
)

func TestCompleteAssemblesTextToolCallsAndUsage(t *testing.T) {
	c, f, _ := newTest(t, sse(chunkText1, chunkText2, chunkCall0a, chunkCall0b, chunkCall1a, chunkCall0c, chunkCall1b, chunkFinish, chunkUsage))
	req := Request{
		Model:        "fake/model",
		Messages:     []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}},
		Tools:        []ToolDef{{Name: "read_file", Description: "reads", Parameters: json.RawMessage(`{"type":"object"}`)}},
		MaxTokens:    4096,
		ProviderOnly: []string{"fake-a", "fake-b"},
	}
	got, err := c.Complete(context.Background(), testKey, req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := Response{
		Content: "Let me look.",
		ToolCalls: []ToolCall{
			{ID: "call_0", Name: "read_file", Arguments: `{"path":"a.txt"}`},
			{ID: "call_1", Name: "exec", Arguments: `{"command":"ls"}`},
		},
		FinishReason: "tool_calls",
		Usage:        Usage{PromptTokens: 120, CompletionTokens: 30, CostUSD: ptr.To(0.00042)},
		Provider:     "Fake",
		Attempts:     1,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
	body := f.bodies[0]
	wantBody := map[string]any{
		"model":          "fake/model",
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
		"tool_choice":    "auto",
		"max_tokens":     float64(4096),
		"provider":       map[string]any{"only": []any{"fake-a", "fake-b"}},
		"messages": []any{
			map[string]any{"role": "system", "content": "be brief"},
			map[string]any{"role": "user", "content": "hi"},
		},
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "read_file", "description": "reads", "parameters": map[string]any{"type": "object"},
		}}},
	}
	if d := cmp.Diff(wantBody, body); d != "" {
		t.Errorf("request body (-want +got):\n%s", d)
	}
	if got := f.paths[0]; got != "/api/v1/chat/completions" {
		t.Errorf("path = %q", got)
	}
	if got := f.headers[0].Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("Authorization = %q", got)
	}
}

func TestRequestShapes(t *testing.T) {
	tests := map[string]struct {
		req  Request
		want string
	}{
		"no tools, no tool_choice, no max_tokens, no provider": {
			req:  Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}},
			want: `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`,
		},
		"assistant with calls only, then the tool result": {
			req: Request{Model: "m", Messages: []Message{
				{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "exec", Arguments: `{"command":"ls"}`}, {ID: "c2", Name: "list_exec_sessions"}}},
				{Role: "tool", ToolCallID: "c1", Content: "a.txt"},
			}},
			want: `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"exec","arguments":"{\"command\":\"ls\"}"}},{"id":"c2","type":"function","function":{"name":"list_exec_sessions","arguments":"{}"}}]},{"role":"tool","content":"a.txt","tool_call_id":"c1"}],"stream":true,"stream_options":{"include_usage":true}}`,
		},
		"user message with an image": {
			req:  Request{Model: "m", Messages: []Message{{Role: "user", Content: "see", ImageURLs: []string{"data:image/png;base64,AA=="}}}},
			want: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := json.Marshal(wireRequestOf(tc.req))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, string(got)); d != "" {
				t.Errorf("wire request of %+v (-want +got):\n%s", tc.req, d)
			}
		})
	}
}

// TestEncodeRequest: the body Complete sends, its messages' encodings taken
// from cache, is json.Marshal of the wire request byte for byte, whatever
// the cache held before.
func TestEncodeRequest(t *testing.T) {
	details := json.RawMessage(`[{"type":"reasoning.text","text":"<b>&</b>","signature":"sig"}]`)
	thread := []Message{
		{Role: "system", Content: "You are a Dot. <tags> & \u2028 \"quotes\" \x01 \xff tab\t"},
		{Role: "user", Content: "run it"},
		{Role: "assistant", Content: "", Reasoning: "thinking", ReasoningDetails: details,
			ToolCalls: []ToolCall{{ID: "c1", Name: "exec", Arguments: `{"command":"ls <dir>"}`}, {ID: "c2", Name: "list"}}},
		{Role: "tool", ToolCallID: "c1", Content: "a.txt\nb.txt"},
		{Role: "tool", ToolCallID: "c2", Content: ""},
		{Role: "user", Content: "[The newest images]", ImageURLs: []string{"data:image/png;base64,AA=="}},
		{Role: "assistant", Content: "done", Reasoning: "r"},
		// The same calls split otherwise between the fields: another message.
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1e", Name: "xec", Arguments: `{"command":"ls <dir>"}`}}},
		{Role: "user", Content: "run it"},
	}
	var cache wireCache
	for i := 0; i <= len(thread); i++ {
		req := Request{Model: "m/x", Messages: thread[:i], MaxTokens: 100, ProviderOnly: []string{"p"}, ReasoningEffort: "high",
			Tools: []ToolDef{{Name: "exec", Description: "runs <it>", Parameters: json.RawMessage(`{"type":"object"}`)}}}
		want, err := json.Marshal(wireRequestOf(req))
		if err != nil {
			t.Fatal(err)
		}
		for try := 0; try < 2; try++ {
			got, err := encodeRequest(&cache, req)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), string(got)); d != "" {
				t.Errorf("%d messages, try %d (-want +got):\n%s", i, try, d)
			}
		}
	}
	// A cache that moved to a new generation still answers the same.
	cache.curBytes = wireCacheBytes
	req := Request{Model: "m", Messages: thread}
	want, _ := json.Marshal(wireRequestOf(req))
	for try := 0; try < 3; try++ {
		if got, err := encodeRequest(&cache, req); err != nil || string(got) != string(want) {
			t.Errorf("after a new generation, try %d: %v\n%s", try, err, got)
		}
	}
}

func TestCompleteCost(t *testing.T) {
	tests := map[string]struct {
		usage string
		want  *float64
	}{
		"cost":                       {`{"prompt_tokens":1,"completion_tokens":2,"cost":0.5}`, ptr.To(0.5)},
		"no cost reported":           {`{"prompt_tokens":1,"completion_tokens":2}`, nil},
		"null cost":                  {`{"prompt_tokens":1,"completion_tokens":2,"cost":null}`, nil},
		"zero cost (a free model)":   {`{"prompt_tokens":1,"completion_tokens":2,"cost":0}`, ptr.To(0.0)},
		"byok adds the upstream":     {`{"prompt_tokens":1,"completion_tokens":2,"cost":0.001,"is_byok":true,"cost_details":{"upstream_inference_cost":0.02}}`, ptr.To(0.021)},
		"upstream without byok only": {`{"prompt_tokens":1,"completion_tokens":2,"cost":0.25,"cost_details":{"upstream_inference_cost":0.25}}`, ptr.To(0.25)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, _, _ := newTest(t, sse(`{"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`, `{"choices":[],"usage":`+tc.usage+`}`))
			got, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if d := cmp.Diff(tc.want, got.Usage.CostUSD, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 })); d != "" {
				t.Errorf("cost of usage %s (-want +got):\n%s", tc.usage, d)
			}
		})
	}
}

func TestCompleteRetries(t *testing.T) {
	ok := sse(`{"choices":[{"delta":{"content":"fine"},"finish_reason":"stop"}]}`, chunkUsage)
	tests := map[string]struct {
		answers    []func(http.ResponseWriter, *http.Request)
		wantSleeps []time.Duration
		wantReqs   int
		wantErr    string // "" = success
		wantStatus int
	}{
		"429 honours Retry-After in seconds": {
			answers:    []func(http.ResponseWriter, *http.Request){status(429, "7", `{"error":{"code":429,"message":"Rate limit exceeded"}}`), ok},
			wantSleeps: []time.Duration{7 * time.Second},
			wantReqs:   2,
		},
		"Retry-After 0 retries at once": {
			answers:    []func(http.ResponseWriter, *http.Request){status(503, "0", `{"error":{"code":503,"message":"busy"}}`), status(429, "0", `{"error":{"code":429,"message":"slow down"}}`), ok},
			wantSleeps: []time.Duration{0, 0},
			wantReqs:   3,
		},
		"5xx backs off exponentially and gives up after 4 attempts": {
			answers: []func(http.ResponseWriter, *http.Request){
				status(502, "", `{"error":{"code":502,"message":"Provider returned error"}}`),
				status(503, "", `{"error":{"code":503,"message":"Provider returned error"}}`),
				status(500, "", `oops`),
				status(502, "", `{"error":{"code":502,"message":"Provider returned error","metadata":{"provider_name":"Fake","raw":"upstream exploded"}}}`),
			},
			wantSleeps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second},
			wantReqs:   4,
			wantErr:    "openrouter answered 502: Provider returned error (Fake: upstream exploded) (after 4 attempts)",
			wantStatus: 502,
		},
		"4xx is not retried and keeps OpenRouter's words": {
			answers:    []func(http.ResponseWriter, *http.Request){status(404, "", `{"error":{"code":404,"message":"No allowed providers are available for the selected model."}}`)},
			wantReqs:   1,
			wantErr:    "openrouter answered 404: No allowed providers are available for the selected model.",
			wantStatus: 404,
		},
		"Retry-After past the cap waits up to the cap and tries again": {
			answers:    []func(http.ResponseWriter, *http.Request){status(429, "3600", `{"error":{"code":429,"message":"Rate limit exceeded"}}`), ok},
			wantSleeps: []time.Duration{60 * time.Second},
			wantReqs:   2,
		},
		"a stream cut after text is tried again and its text dropped": {
			answers:    []func(http.ResponseWriter, *http.Request){cut(chunkText1, chunkText2), ok},
			wantSleeps: []time.Duration{time.Second},
			wantReqs:   2,
		},
		"a mid-stream error event after text is tried again": {
			answers: []func(http.ResponseWriter, *http.Request){
				sse(chunkText1, `{"error":{"code":"server_error","message":"Provider disconnected unexpectedly"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}`),
				ok,
			},
			wantSleeps: []time.Duration{time.Second},
			wantReqs:   2,
		},
		"a stream that ends cleanly after the finish but before the usage is tried again": {
			answers: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprintf(w, "data: %s\n\n", `{"choices":[{"delta":{"content":"half"},"finish_reason":"stop"}]}`)
				},
				ok,
			},
			wantSleeps: []time.Duration{time.Second},
			wantReqs:   2,
		},
		"a stream cut on every attempt gives up after 4": {
			answers:    []func(http.ResponseWriter, *http.Request){cut(chunkText1), cut(chunkText1), cut(chunkText1), cut(chunkText1)},
			wantSleeps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second},
			wantReqs:   4,
			wantErr:    "openrouter stream ended before the response finished: unexpected EOF (after 4 attempts)",
		},
		"402 fails at once": {
			answers:    []func(http.ResponseWriter, *http.Request){status(402, "", `{"error":{"code":402,"message":"Insufficient credits. Add more using https://openrouter.ai/credits"}}`)},
			wantReqs:   1,
			wantErr:    "openrouter answered 402: Insufficient credits. Add more using https://openrouter.ai/credits",
			wantStatus: 402,
		},
		"a stream cut before any text is tried again": {
			answers:    []func(http.ResponseWriter, *http.Request){cut(`{"choices":[{"delta":{"role":"assistant"}}]}`), ok},
			wantSleeps: []time.Duration{time.Second},
			wantReqs:   2,
		},
		"an error chunk without a status is retried": {
			answers: []func(http.ResponseWriter, *http.Request){
				sse(`{"error":{"code":"server_error","message":"Provider disconnected"},"choices":[{"delta":{},"finish_reason":"error"}]}`),
				ok,
			},
			wantSleeps: []time.Duration{time.Second},
			wantReqs:   2,
		},
		"finish_reason error without an error chunk is retried": {
			answers:    []func(http.ResponseWriter, *http.Request){sse(`{"choices":[{"delta":{},"finish_reason":"error"}]}`), ok},
			wantSleeps: []time.Duration{time.Second},
			wantReqs:   2,
		},
		"an error chunk of status 400 is not retried": {
			answers:    []func(http.ResponseWriter, *http.Request){sse(`{"error":{"code":400,"message":"This endpoint's maximum context length is 8192 tokens"},"choices":[{"delta":{},"finish_reason":"error"}]}`)},
			wantReqs:   1,
			wantErr:    "openrouter answered 400: This endpoint's maximum context length is 8192 tokens",
			wantStatus: 400,
		},
		"an error chunk inside the stream is an error of its status": {
			answers: []func(http.ResponseWriter, *http.Request){
				sse(`{"error":{"code":502,"message":"Provider disconnected"},"choices":[{"delta":{},"finish_reason":"error"}]}`),
				ok,
			},
			wantSleeps: []time.Duration{time.Second},
			wantReqs:   2,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, f, s := newTest(t, tc.answers...)
			resp, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if resp.Content != "fine" || resp.Attempts != tc.wantReqs {
					t.Errorf("response = %+v, want content fine after %d attempts", resp, tc.wantReqs)
				}
			} else {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				var apiErr *APIError
				if tc.wantStatus != 0 && (!errors.As(err, &apiErr) || apiErr.Status != tc.wantStatus) {
					t.Errorf("error %v is not an APIError of status %d", err, tc.wantStatus)
				}
			}
			if d := cmp.Diff(tc.wantSleeps, s.d); d != "" {
				t.Errorf("sleeps (-want +got):\n%s", d)
			}
			if got := f.requests(); got != tc.wantReqs {
				t.Errorf("requests = %d, want %d", got, tc.wantReqs)
			}
		})
	}
}

func TestRetryAfterAsHTTPDate(t *testing.T) {
	c := New("http://stand-in.invalid/api/v1", nil)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c.Now = func() time.Time { return now }
	got := c.parseRetryAfter(now.Add(12 * time.Second).Format(http.TimeFormat))
	if got != 12*time.Second {
		t.Errorf("Retry-After as a date 12 s ahead = %s, want 12s", got)
	}
	for v, want := range map[string]time.Duration{"1.5": 1500 * time.Millisecond, "0": 0, "": noRetryAfter, "soon": noRetryAfter, "-3": noRetryAfter} {
		if got := c.parseRetryAfter(v); got != want {
			t.Errorf("Retry-After %q = %s, want %s", v, got, want)
		}
	}
}

// TestCompleteTellsOfEveryWait: a turn hears of each wait before it begins,
// with the server's Retry-After beside what is waited, so a Retry-After past
// the bound is said, not silently shortened.
func TestCompleteTellsOfEveryWait(t *testing.T) {
	ok := sse(`{"choices":[{"delta":{"content":"fine"},"finish_reason":"stop"}]}`, chunkUsage)
	c, _, _ := newTest(t, status(429, "600", `{"error":{"code":429,"message":"Rate limit exceeded"}}`), status(503, "", `{"error":{"code":503,"message":"busy"}}`), ok)
	var waits []Wait
	resp, err := c.Complete(context.Background(), testKey, Request{Model: "m", OnWait: func(w Wait) { waits = append(waits, w) }})
	if err != nil || resp.Content != "fine" {
		t.Fatalf("Complete = %+v, %v", resp, err)
	}
	type seen struct {
		Attempt      int
		Delay, Asked time.Duration
		Capped       bool
	}
	var got []seen
	for _, w := range waits {
		got = append(got, seen{w.Attempt, w.Delay, w.Asked, w.Capped()})
	}
	want := []seen{{1, 60 * time.Second, 600 * time.Second, true}, {2, 2 * time.Second, noRetryAfter, false}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("waits (-want +got):\n%s", d)
	}
}

func TestCompleteCutAfterUsageIsWhole(t *testing.T) {
	// The connection drops after the finish and the usage but before [DONE]:
	// nothing was lost.
	c, f, _ := newTest(t, cut(`{"choices":[{"delta":{"content":"done"},"finish_reason":"stop"}]}`, chunkUsage))
	got, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
	if err != nil || got.Content != "done" || got.Usage.CostUSD == nil || f.requests() != 1 {
		t.Fatalf("Complete = %+v, %v after %d requests", got, err, f.requests())
	}
}

func TestCompleteStreamWithoutFinishIsCut(t *testing.T) {
	// [DONE] arrives but no chunk had a finish reason: not a whole response.
	c, _, _ := newTest(t, sse(chunkCall0a), sse(chunkCall0a), sse(chunkCall0a), sse(chunkCall0a))
	_, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
	if !errors.Is(err, ErrStreamCut) {
		t.Fatalf("error = %v, want ErrStreamCut", err)
	}
}

func TestCompleteStalledStream(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	hang := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chunkText1)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	// A stall is a cut: tried again, MaxAttempts times in all.
	c, f, _ := newTest(t, hang, hang, hang, hang)
	c.StreamIdleTimeout = 50 * time.Millisecond
	_, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
	if !errors.Is(err, ErrStreamCut) || !strings.Contains(err.Error(), "nothing arrived") {
		t.Fatalf("error = %v, want a stalled ErrStreamCut", err)
	}
	if f.requests() != MaxAttempts {
		t.Errorf("a stalled stream was tried %d times, want %d", f.requests(), MaxAttempts)
	}
}

func TestCompleteLength(t *testing.T) {
	c, _, _ := newTest(t, sse(chunkText1, chunkCall0a, chunkCall0b, `{"choices":[{"delta":{},"finish_reason":"length"}]}`, chunkUsage))
	got, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if !got.Cut() || got.FinishReason != FinishLength {
		t.Errorf("finish = %q, Cut() = %v; want length", got.FinishReason, got.Cut())
	}
	if len(got.ToolCalls) != 1 || got.ToolCalls[0].Arguments != `{"path":` {
		t.Errorf("the cut call should come back as it was cut: %+v", got.ToolCalls)
	}
}

func TestCompleteCancelDuringBackoff(t *testing.T) {
	c, _, _ := newTest(t, status(503, "", `{"error":{"code":503,"message":"busy"}}`))
	ctx, cancel := context.WithCancel(context.Background())
	c.Sleep = func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }
	_, err := c.Complete(ctx, testKey, Request{Model: "m"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
}

// roundTripper answers without a network, for the openrouter.ai host.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestAttributionHeadersOnlyForOpenRouter(t *testing.T) {
	body := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	tests := map[string]struct {
		base        string
		wantReferer string
		wantTitle   string
	}{
		"openrouter.ai":         {"https://openrouter.ai/api/v1", "https://github.com/feder-cr/invisible_dots", "invisible_dots"},
		"a stand-in":            {"http://127.0.0.1:9/api/v1", "", ""},
		"a lookalike subdomain": {"https://openrouter.ai.example.com/api/v1", "", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got http.Header
			hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
				got = r.Header.Clone()
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
			})}
			c := New(tc.base, hc)
			if _, err := c.Complete(context.Background(), testKey, Request{Model: "m"}); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if got.Get("HTTP-Referer") != tc.wantReferer || got.Get("X-Title") != tc.wantTitle {
				t.Errorf("base %s: HTTP-Referer %q X-Title %q, want %q %q", tc.base, got.Get("HTTP-Referer"), got.Get("X-Title"), tc.wantReferer, tc.wantTitle)
			}
		})
	}
}

func TestKeyNeverInErrors(t *testing.T) {
	echo := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		fmt.Fprintf(w, `{"error":{"code":401,"message":"bad credentials: %s"}}`, r.Header.Get("Authorization"))
	}
	c, _, _ := newTest(t, echo, echo)
	_, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
	if err == nil || strings.Contains(err.Error(), testKey) {
		t.Fatalf("Complete error %q holds the key", err)
	}
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 401 {
		t.Errorf("the masked error lost its APIError: %v", err)
	}
	_, err = c.ModelLimits(context.Background(), testKey, "a/b")
	if err == nil || strings.Contains(err.Error(), testKey) {
		t.Fatalf("ModelLimits error %q holds the key", err)
	}
	// A transport failure names the URL, never the header.
	c2 := New("http://127.0.0.1:1/api/v1", nil)
	c2.Sleep = (&sleeps{}).sleep
	_, err = c2.Complete(context.Background(), testKey, Request{Model: "m"})
	if err == nil || strings.Contains(err.Error(), testKey) {
		t.Fatalf("transport error %q holds the key", err)
	}
}

func TestModelLimits(t *testing.T) {
	endpoints := func(eps string) func(http.ResponseWriter, *http.Request) {
		return status(200, "", `{"data":{"id":"vendor/model","name":"Model","endpoints":[`+eps+`]}}`)
	}
	tests := map[string]struct {
		answer  func(http.ResponseWriter, *http.Request)
		want    Limits
		wantErr error
	}{
		"widest window, longest answer at it, its providers": {
			answer: endpoints(`
				{"name":"A","provider_name":"Alpha","tag":"alpha","context_length":131072,"max_completion_tokens":8192},
				{"name":"B","provider_name":"Beta","tag":"beta/fp8","context_length":262144,"max_completion_tokens":16384},
				{"name":"C","provider_name":"Gamma","tag":"gamma","context_length":262144,"max_completion_tokens":32768},
				{"name":"D","provider_name":"Delta","tag":"delta","context_length":32768,"max_completion_tokens":65536}`),
			want: Limits{ContextLength: 262144, MaxCompletionTokens: 32768, Providers: []string{"beta/fp8", "gamma"}},
		},
		"no stated answer limit is the window; slug from the name without a tag": {
			answer: endpoints(`{"name":"A","provider_name":"Alpha","context_length":65536,"max_completion_tokens":null}`),
			want:   Limits{ContextLength: 65536, MaxCompletionTokens: 65536, Providers: []string{"alpha"}},
		},
		"a router lists no provider: no limits, no route": {
			answer: endpoints(``),
			want:   Limits{},
		},
		"an unknown model": {
			answer:  status(404, "", `{"error":{"code":404,"message":"Model not found"}}`),
			wantErr: ErrUnknownModel,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, f, _ := newTest(t, tc.answer)
			got, err := c.ModelLimits(context.Background(), testKey, "vendor/model")
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ModelLimits: %v", err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("limits (-want +got):\n%s", d)
			}
			if f.paths[0] != "/api/v1/models/vendor/model/endpoints" {
				t.Errorf("path = %q", f.paths[0])
			}
		})
	}
}

func TestModelLimitsRetries5xx(t *testing.T) {
	c, f, s := newTest(t, status(503, "2", `{"error":{"message":"busy"}}`), status(200, "", `{"data":{"endpoints":[{"tag":"a","context_length":1000,"max_completion_tokens":100}]}}`))
	got, err := c.ModelLimits(context.Background(), testKey, "m/x")
	if err != nil {
		t.Fatalf("ModelLimits: %v", err)
	}
	if got.ContextLength != 1000 || f.requests() != 2 || len(s.d) != 1 || s.d[0] != 2*time.Second {
		t.Errorf("limits %+v after %d requests, sleeps %v", got, f.requests(), s.d)
	}
}

func TestMaxTokensFor(t *testing.T) {
	l := Limits{ContextLength: 100_000, MaxCompletionTokens: 8_000}
	tests := []struct {
		limits Limits
		prompt int
		want   int
	}{
		{l, 10_000, 8_000},
		{l, 90_000, 8_000},
		{l, 95_000, 3_000}, // 100000 - 95000 - the 2000 of the margin
		{l, 98_000, 1},
		{l, 100_000, 1},
		{Limits{ContextLength: 8_192, MaxCompletionTokens: 8_192}, 4_000, 3_936}, // a margin of at least 256
		{Limits{}, 10, 0},
	}
	for _, tc := range tests {
		if got := tc.limits.MaxTokensFor(tc.prompt); got != tc.want {
			t.Errorf("%+v.MaxTokensFor(%d) = %d, want %d", tc.limits, tc.prompt, got, tc.want)
		}
	}
}

func TestToolCallDeltasWithoutIndex(t *testing.T) {
	// Some providers leave the index out and repeat the id and name in
	// every delta.
	c, _, _ := newTest(t, sse(
		`{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"grep","arguments":"{\"pat"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"grep","arguments":"tern\":\"x\"}"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"list_dir","arguments":"{}"}}]}}]}`,
		chunkFinish, chunkUsage))
	got, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := []ToolCall{{ID: "a", Name: "grep", Arguments: `{"pattern":"x"}`}, {ID: "b", Name: "list_dir", Arguments: "{}"}}
	if d := cmp.Diff(want, got.ToolCalls); d != "" {
		t.Errorf("tool calls (-want +got):\n%s", d)
	}
}

// TestReasoningIsAssembledAndSentBack: every documented reasoning shape of a
// stream (delta.reasoning, and reasoning_details of type reasoning.text with
// its signature, reasoning.summary and reasoning.encrypted, each in pieces
// sharing an index) comes back whole, with the reasoning tokens, and goes
// back on the assistant message of a later request unchanged.
func TestReasoningIsAssembledAndSentBack(t *testing.T) {
	c, f, _ := newTest(t,
		sse(
			`{"choices":[{"delta":{"role":"assistant","reasoning":"Let me think","reasoning_details":[{"type":"reasoning.text","text":"Let me ","index":0,"format":"anthropic-claude-v1"}]}}]}`,
			`{"choices":[{"delta":{"reasoning":" about it.","reasoning_details":[{"type":"reasoning.text","text":"think about it.","index":0}]}}]}`,
			`{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.text","signature":"sig-abc==","index":0}]}}]}`,
			`{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.summary","summary":"Thinks ","id":"rs_1","index":1}]}}]}`,
			`{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.summary","summary":"briefly.","index":1}]}}]}`,
			`{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.encrypted","data":"gAAAAB-opaque","id":"rs_2","index":2}]}}]}`,
			chunkCall0a, chunkCall0b, chunkCall0c, chunkFinish,
			`{"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":300,"completion_tokens_details":{"reasoning_tokens":250},"cost":0.001}}`),
		sse(`{"choices":[{"delta":{"content":"fine"},"finish_reason":"stop"}]}`, chunkUsage))
	got, err := c.Complete(context.Background(), testKey, Request{Model: "m"})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if got.Reasoning != "Let me think about it." || got.Usage.ReasoningTokens != 250 {
		t.Errorf("reasoning = %q with %d reasoning tokens", got.Reasoning, got.Usage.ReasoningTokens)
	}
	var details []map[string]any
	if err := json.Unmarshal(got.ReasoningDetails, &details); err != nil {
		t.Fatalf("reasoning details %s: %v", got.ReasoningDetails, err)
	}
	wantDetails := []map[string]any{
		{"type": "reasoning.text", "text": "Let me think about it.", "signature": "sig-abc==", "format": "anthropic-claude-v1", "index": float64(0)},
		{"type": "reasoning.summary", "summary": "Thinks briefly.", "id": "rs_1", "index": float64(1)},
		{"type": "reasoning.encrypted", "data": "gAAAAB-opaque", "id": "rs_2", "index": float64(2)},
	}
	if d := cmp.Diff(wantDetails, details); d != "" {
		t.Errorf("reasoning details (-want +got):\n%s", d)
	}

	next := Request{Model: "m", Messages: []Message{
		{Role: "user", Content: "read a.txt"},
		{Role: "assistant", ToolCalls: got.ToolCalls, Reasoning: got.Reasoning, ReasoningDetails: got.ReasoningDetails},
		{Role: "tool", ToolCallID: "call_0", Content: "hello"},
	}, ReasoningEffort: "high"}
	if _, err := c.Complete(context.Background(), testKey, next); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	body := f.bodies[1]
	if d := cmp.Diff(map[string]any{"effort": "high"}, body["reasoning"]); d != "" {
		t.Errorf("reasoning option (-want +got):\n%s", d)
	}
	sent := body["messages"].([]any)[1].(map[string]any)
	if sent["reasoning"] != "Let me think about it." {
		t.Errorf("reasoning sent back = %v", sent["reasoning"])
	}
	var back []map[string]any
	raw, _ := json.Marshal(sent["reasoning_details"])
	json.Unmarshal(raw, &back)
	if d := cmp.Diff(wantDetails, back); d != "" {
		t.Errorf("reasoning details sent back (-want +got):\n%s", d)
	}
	if _, ok := body["messages"].([]any)[0].(map[string]any)["reasoning_details"]; ok {
		t.Errorf("a user message carries reasoning_details")
	}
}

// TestCompleteKeepsTheConnection: a stream read to its [DONE] is read to
// its end, so the next request goes over the same HTTP/1.1 connection; a
// stream that goes on after [DONE] is answered all the same, and at once.
func TestCompleteKeepsTheConnection(t *testing.T) {
	// [DONE] is flushed as every event is, and the stream's end (the last
	// chunk) comes a moment after it, as from a real server.
	answer := func(w http.ResponseWriter, r *http.Request) {
		sse(chunkText2, chunkFinish, chunkUsage)(w, r)
		w.(http.Flusher).Flush()
		time.Sleep(time.Millisecond)
	}
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	hold := func(w http.ResponseWriter, r *http.Request) {
		answer(w, r)
		select {
		case <-held:
		case <-r.Context().Done():
		}
	}
	c, _, _ := newTest(t, answer, answer, hold, answer)
	tr := c.http.Transport.(*http.Transport).Clone()
	dial := tr.DialContext
	var n int
	var mu sync.Mutex
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		n++
		mu.Unlock()
		return dial(ctx, network, addr)
	}
	c.http = &http.Client{Transport: tr}
	dialed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	req := Request{Model: "fake/model", Messages: []Message{{Role: "user", Content: "hi"}}}
	for i := range 2 {
		if _, err := c.Complete(context.Background(), testKey, req); err != nil {
			t.Fatalf("Complete %d: %v", i+1, err)
		}
	}
	if got := dialed(); got != 1 {
		t.Errorf("two answers dialed %d connections, want 1", got)
	}
	start := time.Now()
	if _, err := c.Complete(context.Background(), testKey, req); err != nil {
		t.Fatalf("Complete of a stream that goes on after [DONE]: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a stream that goes on after [DONE] was answered after %s", d)
	}
	if _, err := c.Complete(context.Background(), testKey, req); err != nil {
		t.Fatalf("Complete after it: %v", err)
	}
	if got := dialed(); got != 2 {
		t.Errorf("the answer after a stream that went on after [DONE] dialed %d connections in all, want 2 (that stream's was closed)", got)
	}
}
