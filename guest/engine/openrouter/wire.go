package openrouter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The JSON of OpenRouter's OpenAI-compatible chat API, as far as the engine
// uses it.

type wireRequest struct {
	Model         string         `json:"model"`
	Messages      []wireMessage  `json:"messages"`
	Tools         []wireTool     `json:"tools,omitempty"`
	ToolChoice    string         `json:"tool_choice,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Provider      *wireProvider  `json:"provider,omitempty"`
	Reasoning     *wireReasoning `json:"reasoning,omitempty"`
}

// wireReasoning is OpenRouter's reasoning request option.
type wireReasoning struct {
	Effort string `json:"effort"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireProvider struct {
	Only []string `json:"only"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"` // string, []wirePart, or nil for an assistant message with only calls
	ToolCallID string         `json:"tool_call_id,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	// An assistant message's reasoning goes back as the model gave it: the
	// text, and the details (signatures, encrypted blocks) a provider checks.
	Reasoning        string          `json:"reasoning,omitempty"`
	ReasoningDetails json.RawMessage `json:"reasoning_details,omitempty"`
}

type wirePart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	ImageURL *wireImageURL `json:"image_url,omitempty"`
}

type wireImageURL struct {
	URL string `json:"url"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string          `json:"type"`
	Function wireToolFuncDef `json:"function"`
}

type wireToolFuncDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

func wireRequestOf(req Request) wireRequest {
	w := wireRequest{
		Model:         req.Model,
		Stream:        true,
		StreamOptions: &streamOptions{IncludeUsage: true},
		MaxTokens:     req.MaxTokens,
		Messages:      make([]wireMessage, 0, len(req.Messages)),
	}
	if len(req.ProviderOnly) > 0 {
		w.Provider = &wireProvider{Only: req.ProviderOnly}
	}
	if req.ReasoningEffort != "" {
		w.Reasoning = &wireReasoning{Effort: req.ReasoningEffort}
	}
	for _, t := range req.Tools {
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireToolFuncDef{
			Name: t.Name, Description: t.Description, Parameters: t.Parameters,
		}})
	}
	if len(w.Tools) > 0 {
		w.ToolChoice = "auto"
	}
	for _, m := range req.Messages {
		w.Messages = append(w.Messages, wireMessageOf(m))
	}
	return w
}

// wireMessageOf is one message as the wire carries it.
func wireMessageOf(m Message) wireMessage {
	wm := wireMessage{Role: m.Role, ToolCallID: m.ToolCallID}
	if m.Role == "assistant" {
		wm.Reasoning = m.Reasoning
		if len(m.ReasoningDetails) > 0 {
			wm.ReasoningDetails = m.ReasoningDetails
		}
	}
	switch {
	case len(m.ImageURLs) > 0:
		parts := []wirePart{{Type: "text", Text: m.Content}}
		for _, u := range m.ImageURLs {
			parts = append(parts, wirePart{Type: "image_url", ImageURL: &wireImageURL{URL: u}})
		}
		wm.Content = parts
	case m.Content == "" && len(m.ToolCalls) > 0:
		wm.Content = nil
	default:
		wm.Content = m.Content
	}
	for _, tc := range m.ToolCalls {
		args := tc.Arguments
		if args == "" {
			args = "{}"
		}
		wm.ToolCalls = append(wm.ToolCalls, wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: args}})
	}
	return wm
}

// messagesKey opens the messages array in the encoding of a request whose
// messages are left out (an empty, not a nil, list): the first such bytes
// are the key's, since the one field before it is the model's name, a JSON
// string, which holds no bare quote.
var messagesKey = []byte(`"messages":[]`)

// encodeRequest is json.Marshal(wireRequestOf(req)), byte for byte. Every
// request of a thread carries the whole thread, each message encoded as the
// one before encoded it: the messages' encodings are taken from cache, and
// only the new ones are encoded. Encoding the whole thread at every request
// made a request's cost grow with the conversation.
func encodeRequest(cache *wireCache, req Request) ([]byte, error) {
	msgs := req.Messages
	req.Messages = nil
	head, err := json.Marshal(wireRequestOf(req))
	if err != nil {
		return nil, err
	}
	at := bytes.Index(head, messagesKey)
	if at < 0 {
		return nil, fmt.Errorf("the request's encoding has no messages")
	}
	at += len(messagesKey) - 1 // at the list's ]
	encoded := make([][]byte, len(msgs))
	size := len(head)
	for i, m := range msgs {
		if encoded[i], err = cache.encode(m); err != nil {
			return nil, err
		}
		size += len(encoded[i]) + 1
	}
	body := make([]byte, 0, size)
	body = append(body, head[:at]...)
	for i, raw := range encoded {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, raw...)
	}
	return append(body, head[at:]...), nil
}

// wireCache holds the encodings of the messages of recent requests, by
// what a message's encoding is made of. Two generations bound it: the
// messages encoded or used since the current one began, and those of the
// one before, which a message moves out of when a request uses it again.
// A generation ends when it holds wireCacheBytes, so what is kept is about
// twice the longest thread's encoding at most, besides the message texts
// the threads hold anyway.
type wireCache struct {
	mu       sync.Mutex
	cur      map[wireKey][]byte
	prev     map[wireKey][]byte
	curBytes int
}

const wireCacheBytes = 16 << 20

// wireKey is everything a message's encoding is made of; a message with
// images is not kept (its images are the turn's, shown once).
type wireKey struct {
	role, content, toolCallID, reasoning, details string
	// calls are the tool calls, each field prefixed with its length.
	calls string
}

func keyOf(m Message) wireKey {
	k := wireKey{role: m.Role, content: m.Content, toolCallID: m.ToolCallID, reasoning: m.Reasoning, details: string(m.ReasoningDetails)}
	if len(m.ToolCalls) > 0 {
		var b strings.Builder
		for _, c := range m.ToolCalls {
			for _, f := range []string{c.ID, c.Name, c.Arguments} {
				b.WriteString(strconv.Itoa(len(f)))
				b.WriteByte(':')
				b.WriteString(f)
			}
		}
		k.calls = b.String()
	}
	return k
}

// encode is json.Marshal(wireMessageOf(m)), from cache when it holds it.
func (c *wireCache) encode(m Message) ([]byte, error) {
	if c == nil || len(m.ImageURLs) > 0 {
		return json.Marshal(wireMessageOf(m))
	}
	k := keyOf(m)
	c.mu.Lock()
	raw, ok := c.cur[k]
	if !ok {
		if raw, ok = c.prev[k]; ok {
			c.keepLocked(k, raw)
		}
	}
	c.mu.Unlock()
	if ok {
		return raw, nil
	}
	raw, err := json.Marshal(wireMessageOf(m))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.keepLocked(k, raw)
	c.mu.Unlock()
	return raw, nil
}

func (c *wireCache) keepLocked(k wireKey, raw []byte) {
	if c.cur == nil || c.curBytes >= wireCacheBytes {
		c.prev, c.cur, c.curBytes = c.cur, map[wireKey][]byte{}, 0
	}
	if _, ok := c.cur[k]; !ok {
		c.cur[k] = raw
		c.curBytes += len(raw) + len(k.content) + len(k.details) + len(k.calls)
	}
}

type wireError struct {
	Code     any             `json:"code"`
	Message  string          `json:"message"`
	Metadata json.RawMessage `json:"metadata"`
}

// text returns the error's message, with the upstream provider's own words
// when OpenRouter passed them on (metadata.raw), and its code as text.
func (e *wireError) text() (msg, code string) {
	msg = strings.TrimSpace(e.Message)
	if e.Code != nil {
		code = strings.Trim(fmt.Sprint(e.Code), `"`)
	}
	var meta struct {
		Raw          any    `json:"raw"`
		ProviderName string `json:"provider_name"`
	}
	if len(e.Metadata) > 0 && json.Unmarshal(e.Metadata, &meta) == nil {
		if raw, ok := meta.Raw.(string); ok && raw != "" && !strings.Contains(msg, raw) {
			if len(raw) > 300 {
				raw = raw[:300] + "…"
			}
			if meta.ProviderName != "" {
				msg += " (" + meta.ProviderName + ": " + raw + ")"
			} else {
				msg += " (" + raw + ")"
			}
		}
	}
	return msg, code
}

type wireChunk struct {
	Provider string `json:"provider"`
	Choices  []struct {
		Delta struct {
			Content          *string           `json:"content"`
			Reasoning        *string           `json:"reasoning"`
			ReasoningDetails []json.RawMessage `json:"reasoning_details"`
			ToolCalls        []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens            int `json:"prompt_tokens"`
		CompletionTokens        int `json:"completion_tokens"`
		CompletionTokensDetails *struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
		Cost        *float64 `json:"cost"`
		IsBYOK      bool     `json:"is_byok"`
		CostDetails *struct {
			UpstreamInferenceCost *float64 `json:"upstream_inference_cost"`
		} `json:"cost_details"`
	} `json:"usage"`
	Error *wireError `json:"error"`
}

// assembler builds one response from the chunks of a stream. Tool calls come
// in pieces: the first delta of a call carries its index, id and name, later
// ones pieces of its arguments, keyed by index (some providers leave the index
// out and repeat the id instead; both are handled).
type assembler struct {
	content   strings.Builder
	reasoning strings.Builder
	details   reasoningDetails
	calls     map[int]*ToolCall
	order     []int
	lastIdx   int
	finish    string
	usage     Usage
	sawUsage  bool
	provider  string
}

func newAssembler() *assembler { return &assembler{calls: map[int]*ToolCall{}, lastIdx: -1} }

func (a *assembler) add(payload []byte) error {
	var ch wireChunk
	if err := json.Unmarshal(payload, &ch); err != nil {
		return fmt.Errorf("%w: a chunk is not JSON: %v", ErrStreamCut, err)
	}
	if ch.Error != nil {
		msg, code := ch.Error.text()
		e := &APIError{Code: code, Message: msg, InStream: true}
		// A mid-stream error carries the status as its code when it has one.
		var status int
		if _, err := fmt.Sscanf(code, "%d", &status); err == nil && status >= 400 && status < 600 {
			e.Status = status
		}
		return e
	}
	if ch.Provider != "" {
		a.provider = ch.Provider
	}
	for _, c := range ch.Choices {
		if c.Delta.Content != nil && *c.Delta.Content != "" {
			a.content.WriteString(*c.Delta.Content)
		}
		if c.Delta.Reasoning != nil {
			a.reasoning.WriteString(*c.Delta.Reasoning)
		}
		for _, d := range c.Delta.ReasoningDetails {
			if err := a.details.add(d); err != nil {
				return fmt.Errorf("%w: %v", ErrStreamCut, err)
			}
		}
		for _, d := range c.Delta.ToolCalls {
			idx := a.indexOf(d.Index, d.ID)
			tc, ok := a.calls[idx]
			if !ok {
				tc = &ToolCall{}
				a.calls[idx] = tc
				a.order = append(a.order, idx)
			}
			a.lastIdx = idx
			if tc.ID == "" {
				tc.ID = d.ID
			}
			// A name comes whole in the first delta; a provider repeating it
			// in every delta must not double it.
			if d.Function.Name != "" && tc.Name != d.Function.Name {
				if tc.Name == "" {
					tc.Name = d.Function.Name
				} else {
					tc.Name += d.Function.Name
				}
			}
			tc.Arguments += d.Function.Arguments
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			a.finish = *c.FinishReason
		}
	}
	if u := ch.Usage; u != nil {
		a.sawUsage = true
		a.usage.PromptTokens = u.PromptTokens
		a.usage.CompletionTokens = u.CompletionTokens
		a.usage.ReasoningTokens = 0
		if u.CompletionTokensDetails != nil {
			a.usage.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
		}
		a.usage.CostUSD = nil
		if u.Cost != nil {
			cost := *u.Cost
			// BYOK: OpenRouter's fee is usage.cost and the provider's charge is
			// the upstream cost beside it; count both (ref 8.2), which may count
			// more than was charged and never less.
			if u.IsBYOK && u.CostDetails != nil && u.CostDetails.UpstreamInferenceCost != nil {
				cost += *u.CostDetails.UpstreamInferenceCost
			}
			a.usage.CostUSD = &cost
		}
	}
	return nil
}

func (a *assembler) indexOf(index *int, id string) int {
	if index != nil {
		return *index
	}
	if id != "" {
		for idx, tc := range a.calls {
			if tc.ID == id {
				return idx
			}
		}
		return len(a.calls)
	}
	if a.lastIdx >= 0 {
		return a.lastIdx
	}
	return 0
}

func (a *assembler) response() Response {
	r := Response{Content: a.content.String(), FinishReason: a.finish, Usage: a.usage, Provider: a.provider,
		Reasoning: a.reasoning.String(), ReasoningDetails: a.details.json()}
	idxs := append([]int(nil), a.order...)
	sort.Ints(idxs)
	for _, i := range idxs {
		r.ToolCalls = append(r.ToolCalls, *a.calls[i])
	}
	return r
}

// reasoningDetails merges the reasoning_details of a stream. OpenRouter
// streams each detail in pieces that share its index: the text (or summary,
// or encrypted data) grows piece by piece and the signature comes whole in
// one of them. Every field a piece carries is kept as it came, so what goes
// back to the model is what the provider made (ref 8.6: the reasoning stays
// as it is); a detail of a type this client does not know is kept too.
type reasoningDetails struct {
	items []map[string]json.RawMessage
	byIdx map[int]int
}

// appended are the fields whose pieces are concatenated.
var appended = map[string]bool{"text": true, "summary": true, "data": true}

func (r *reasoningDetails) add(raw json.RawMessage) error {
	var piece map[string]json.RawMessage
	if err := json.Unmarshal(raw, &piece); err != nil {
		return fmt.Errorf("a reasoning detail is not a JSON object: %v", err)
	}
	at := -1
	if v, ok := piece["index"]; ok {
		var idx int
		if json.Unmarshal(v, &idx) == nil {
			if r.byIdx == nil {
				r.byIdx = map[int]int{}
			}
			if i, ok := r.byIdx[idx]; ok {
				at = i
			} else {
				r.byIdx[idx] = len(r.items)
			}
		}
	}
	if at < 0 {
		r.items = append(r.items, piece)
		return nil
	}
	item := r.items[at]
	for k, v := range piece {
		old, had := item[k]
		if !had || !appended[k] {
			if had && string(v) == "null" {
				continue
			}
			item[k] = v
			continue
		}
		var a, b string
		if json.Unmarshal(old, &a) != nil || json.Unmarshal(v, &b) != nil {
			item[k] = v
			continue
		}
		merged, _ := json.Marshal(a + b)
		item[k] = merged
	}
	return nil
}

// json is the merged details as one JSON array, nil when there were none.
func (r *reasoningDetails) json() json.RawMessage {
	if len(r.items) == 0 {
		return nil
	}
	b, err := json.Marshal(r.items)
	if err != nil {
		return nil
	}
	return b
}
