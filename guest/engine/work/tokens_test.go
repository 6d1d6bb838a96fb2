package work

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/engine/openrouter"
)

// TestTextTokensIsNeverBelowATokenizer: on the kinds of text a request
// carries, the estimate is at least what real tokenizers count (o200k_base
// and cl100k_base, measured with tiktoken on these exact strings), where four
// bytes a token falls short on all but prose.
func TestTextTokensIsNeverBelowATokenizer(t *testing.T) {
	tests := map[string]struct {
		text      string
		tokenizer int // the larger of the two counts
	}{
		"CJK":    {"这是一个测试。我们需要估计令牌的数量，以便请求不会超过模型的上下文窗口。日本語の文章も含まれています。한국어 문장도 있습니다.", 58},
		"base64": {"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==", 54},
		"JSON":   {`{"entries":[{"name":"a.txt","size":1234,"mtime":"2026-11-30T12:00:00Z","type":"file"},{"name":"b","size":0,"mtime":"2026-11-30T12:00:01Z","type":"dir"}]}`, 63},
		"code":   {"func (c *Client) Complete(ctx context.Context, key string, req Request) (Response, error) {\n\tbody, err := json.Marshal(wireRequestOf(req))\n\tif err != nil {\n\t\treturn Response{}, fmt.Errorf(\"encode: %w\", err)\n\t}\n}", 57},
		"prose":  {"The person asked the Dot to look at the report and summarize what changed since last week.", 18},
	}
	for name, tc := range tests {
		got := textTokens(tc.text)
		if got < tc.tokenizer {
			t.Errorf("textTokens(%s) = %d, below the tokenizer's %d", name, got, tc.tokenizer)
		}
		if got > 2*tc.tokenizer {
			t.Errorf("textTokens(%s) = %d, more than twice the tokenizer's %d: the window is wasted", name, got, tc.tokenizer)
		}
	}
}

// TestMeasureRequestStartsFromTheProvidersCount: a request that goes on from
// the last one is its reported prompt plus the estimate of what was added; a
// thread that changed under it (a compaction) is estimated whole.
func TestMeasureRequestStartsFromTheProvidersCount(t *testing.T) {
	sys := openrouter.Message{Role: "system", Content: "you are a Dot"}
	user := openrouter.Message{Role: "user", Content: strings.Repeat("这是一个测试。", 200)}
	last := &countedRequest{msgs: []openrouter.Message{sys, user}, promptTokens: 5000}
	call := openrouter.Message{Role: "assistant", ToolCalls: []openrouter.ToolCall{{ID: "c", Name: "exec", Arguments: `{"cmd":"ls"}`}}}
	result := openrouter.Message{Role: "tool", ToolCallID: "c", Content: "a.txt\nb.txt"}
	next := []openrouter.Message{{Role: "system", Content: "you are a Dot, now at 12:01"}, user, call, result}
	added := estimateTokens(next, nil) - estimateTokens(last.msgs, nil)
	if got, want := measureRequest(last, next, nil), 5000+added; got != want {
		t.Errorf("measure of a request that goes on = %d, want the provider's 5000 + %d added", got, added)
	}
	compacted := []openrouter.Message{sys, {Role: "user", Content: "[Summary] ..."}}
	if got, want := measureRequest(last, compacted, nil), estimateTokens(compacted, nil); got != want {
		t.Errorf("measure of a compacted thread = %d, want its estimate %d", got, want)
	}
	if got, want := measureRequest(nil, next, nil), estimateTokens(next, nil); got != want {
		t.Errorf("measure of a first request = %d, want its estimate %d", got, want)
	}
}

func TestContextLengthRefusal(t *testing.T) {
	tests := map[string]struct {
		err        error
		window     int
		refusalWas bool
	}{
		"OpenRouter's words": {&openrouter.APIError{Status: 400, Message: "This endpoint's maximum context length is 131072 tokens. However, you requested about 140000 tokens"}, 131072, true},
		"in a wrapped error": {fmt.Errorf("x: %w", &openrouter.APIError{Status: 400, Message: "maximum context length is 8192 tokens"}), 8192, true},
		"the code only":      {&openrouter.APIError{Status: 400, Code: "context_length_exceeded", Message: "too long"}, 0, true},
		"another 400":        {&openrouter.APIError{Status: 400, Message: "tools are not supported"}, 0, false},
		"not a 400":          {&openrouter.APIError{Status: 502, Message: "maximum context length is 8192 tokens"}, 0, false},
		"not an API error":   {errors.New("maximum context length is 8192 tokens"), 0, false},
	}
	for name, tc := range tests {
		window, ok := contextLengthRefusal(tc.err)
		if window != tc.window || ok != tc.refusalWas {
			t.Errorf("%s: contextLengthRefusal(%v) = %d, %v; want %d, %v", name, tc.err, window, ok, tc.window, tc.refusalWas)
		}
	}
}
