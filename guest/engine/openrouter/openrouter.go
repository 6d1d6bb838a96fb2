// Package openrouter is the engine's client of OpenRouter's OpenAI-compatible
// chat completions API (ref 8.5): every request streamed with tools
// (tool_choice auto) and the usage of the last chunk (stream_options
// include_usage), the model's limits read from GET /models/{model}/endpoints,
// retries with backoff on 429 and 5xx honouring Retry-After, and the cost of a
// request from usage.cost (ref 8.2).
//
// Why net/http and not github.com/openai/openai-go: what this client must get
// right is exactly what that library leaves to raw JSON or hides. usage.cost,
// usage.cost_details.upstream_inference_cost and is_byok are OpenRouter's own
// fields (reachable only through RawJSON), provider.only needs extra request
// fields, and its built-in retries sleep on the real clock with a policy of
// their own, while ref 8.5 fixes the policy (4 attempts, Retry-After) and the
// tests must not sleep. A cut stream must also be told apart from a finished
// one (no finish_reason, no [DONE]). The wire is small: one POST with a
// server-sent-events answer and one GET, so the standard library is enough.
package openrouter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultBaseURL is OpenRouter's API. INVISIBLE_DOTS_OPENROUTER_URL overrides
// it for tests and the smoke (ref 8.8); the engine passes it to New.
const DefaultBaseURL = "https://openrouter.ai/api/v1"

// The attribution headers of ref 8.5, sent only when the base URL's host is
// openrouter.ai so that a stand-in used by tests never receives them.
const (
	refererHeader  = "https://github.com/feder-cr/invisible_dots"
	titleHeader    = "invisible_dots"
	openRouterHost = "openrouter.ai"
)

// MaxAttempts is how many times one request is tried on 429 and 5xx (ref 8.5).
const MaxAttempts = 4

// Finish reasons the engine acts on.
const (
	FinishStop      = "stop"
	FinishToolCalls = "tool_calls"
	// FinishLength is a response cut at max_tokens: none of its tool calls may
	// run (ref 8.5), the engine stores what it said and asks the model to go on.
	FinishLength = "length"
)

// Client talks to one OpenRouter base URL. It holds no key: the key is passed
// to every call from the engine's memory (ref 4.3), so a new key needs no new
// client and the key is never kept here.
type Client struct {
	baseURL  *url.URL
	http     *http.Client
	official bool // the base URL's host is openrouter.ai

	// Sleep waits between attempts; tests replace it so retries do not sleep
	// for real. It returns ctx.Err() when ctx ends first.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now reads the clock for Retry-After given as an HTTP date.
	Now func() time.Time
	// Jitter returns a random duration in [0, d) added to each backoff step.
	Jitter func(d time.Duration) time.Duration
	// BaseBackoff is the first backoff step; each retry doubles it.
	BaseBackoff time.Duration
	// MaxBackoff caps one wait, Retry-After included, so a server asking for an
	// hour does not hold a turn for an hour: the client waits MaxBackoff and
	// tries again, and tells Request.OnWait that it waited less than asked.
	MaxBackoff time.Duration
	// StreamIdleTimeout ends a stream that sends nothing (not even OpenRouter's
	// keep-alive comments) for this long: a stalled stream, ref 8.2.
	StreamIdleTimeout time.Duration

	// wire holds the encodings of recent requests' messages (encodeRequest).
	wire wireCache
}

// New returns a client of baseURL (DefaultBaseURL when empty). httpClient may
// be nil for http.DefaultClient; it should carry no overall Timeout, since a
// long answer streams for minutes (StreamIdleTimeout bounds a stall instead).
func New(baseURL string, httpClient *http.Client) *Client {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		// A bad override is a deployment error; keep it visible on every call
		// rather than panicking in the engine's start.
		u = &url.URL{Scheme: "invalid", Opaque: baseURL}
	}
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{
		baseURL:           u,
		http:              httpClient,
		official:          strings.EqualFold(u.Hostname(), openRouterHost),
		Sleep:             sleepCtx,
		Now:               time.Now,
		Jitter:            func(d time.Duration) time.Duration { return time.Duration(rand.Int64N(int64(d) + 1)) },
		BaseBackoff:       time.Second,
		MaxBackoff:        60 * time.Second,
		StreamIdleTimeout: 180 * time.Second,
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Request is one chat completion request.
type Request struct {
	Model    string
	Messages []Message
	// Tools offered; nil sends no tools and no tool_choice (a summary request
	// carries none, ref 8.6).
	Tools []ToolDef
	// MaxTokens is sent as max_tokens when > 0 (Limits.MaxTokensFor).
	MaxTokens int
	// ProviderOnly is sent as provider.only when not empty (Limits.Providers).
	ProviderOnly []string
	// ReasoningEffort is sent as reasoning.effort when not empty (none, low,
	// medium, high); empty leaves the model's own default.
	ReasoningEffort string
	// OnWait (may be nil) is told of every wait between two attempts, before
	// it begins, so a turn can say why it is not moving (task.progress).
	OnWait func(Wait)
}

// Wait is one pause between two attempts of a request.
type Wait struct {
	// Attempt is the attempt that failed (1 to MaxAttempts-1).
	Attempt int
	// Delay is how long the client waits.
	Delay time.Duration
	// Asked is the server's Retry-After, or -1 when it gave none. Asked >
	// Delay is a Retry-After longer than MaxBackoff, which is waited up to
	// the bound only.
	Asked time.Duration
	// Err is why the attempt failed.
	Err error
}

// Capped reports a Retry-After longer than the client waits.
func (w Wait) Capped() bool { return w.Asked > w.Delay }

// Message is one message of the OpenAI chat shape.
type Message struct {
	Role       string // system, user, assistant, tool
	Content    string
	ToolCallID string // a tool message's call
	ToolCalls  []ToolCall
	// ImageURLs (data: URLs) make a user message's content a list of parts:
	// the text, then the images (a tool's screenshot shown to the model).
	ImageURLs []string
	// Reasoning and ReasoningDetails are an assistant message's reasoning as
	// the model gave it (Response), sent back unchanged on every later
	// request of the thread: providers that sign their reasoning (Gemini's
	// thought signatures, Anthropic's thinking blocks) refuse a tool loop
	// without it.
	Reasoning        string
	ReasoningDetails json.RawMessage
}

// ToolCall is one function call of an assistant message.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text as the model wrote it
}

// ToolDef is one tool offered to the model.
type ToolDef struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON schema of the arguments
}

// Response is what a streamed completion assembled to.
type Response struct {
	Content string
	// ToolCalls in the order the model gave them. With FinishReason "length"
	// the last one may be incomplete and none may run (ref 8.5).
	ToolCalls    []ToolCall
	FinishReason string
	Usage        Usage
	// Provider is who served the request, as OpenRouter reports it.
	Provider string
	// Attempts is how many attempts the request took (1 to MaxAttempts).
	Attempts int
	// Reasoning is the text of delta.reasoning; ReasoningDetails the merged
	// delta.reasoning_details (a JSON array, every documented type:
	// reasoning.text with its signature, reasoning.summary,
	// reasoning.encrypted), nil when the model gave none.
	Reasoning        string
	ReasoningDetails json.RawMessage
}

// Usage is the usage of the last chunk.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// ReasoningTokens is completion_tokens_details.reasoning_tokens, a part
	// of CompletionTokens.
	ReasoningTokens int
	// CostUSD is usage.cost plus, for a BYOK request, the upstream cost
	// (ref 8.2); nil when OpenRouter reported no cost, which the engine must
	// treat as a stop (the cap cannot be enforced blind).
	CostUSD *float64
}

// Cut reports a response cut at max_tokens.
func (r Response) Cut() bool { return r.FinishReason == FinishLength }

// APIError is an answer of OpenRouter that is not a success: an HTTP status,
// or an error chunk inside a stream (Status 0 then, unless the chunk gave one).
type APIError struct {
	Status  int
	Code    string // OpenRouter's error code when it gave one
	Message string // OpenRouter's own words ("No allowed providers are available")
	// Attempts is how many attempts were made before giving up.
	Attempts int
	// InStream: the error came inside a 200 stream, as a chunk.
	InStream bool
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("openrouter")
	if e.Status != 0 {
		fmt.Fprintf(&b, " answered %d", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

// Retryable reports the statuses ref 8.5 retries: 429 and 5xx, and an error
// chunk of a stream that gives no status (the provider failed mid-way).
func (e *APIError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500 || e.InStream && e.Status == 0
}

// ErrStreamCut is a stream that ended without a finish reason: the connection
// dropped or stalled. It has no cost to count (ref 8.2).
var ErrStreamCut = errors.New("openrouter stream ended before the response finished")

// ErrUnknownModel is a model OpenRouter does not know (ref 8.5: the turn fails
// in words).
var ErrUnknownModel = errors.New("openrouter does not know this model")

// Complete sends req streamed and assembles the answer. A request is tried up
// to MaxAttempts times on 429, 5xx, connection failures, mid-stream error
// events and streams that end before the response finished, waiting with
// exponential backoff or as Retry-After says (up to MaxBackoff). Nothing of a
// failed attempt comes back: the response is the one whole attempt's, so a
// caller never sees text that a retry then replaces (a caller that ever
// streams text to a person decides there what a retry means for it). The key
// is used only in the Authorization header and is masked out of every error.
func (c *Client) Complete(ctx context.Context, key string, req Request) (Response, error) {
	body, err := encodeRequest(&c.wire, req)
	if err != nil {
		return Response{}, fmt.Errorf("encode the chat request: %w", err)
	}
	var lastErr error
	attempts := 0
	for attempts < MaxAttempts {
		attempts++
		resp, retryAfter, err := c.attempt(ctx, key, body)
		if err == nil {
			resp.Attempts = attempts
			return resp, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return Response{}, maskKey(ctx.Err(), key)
		}
		if !retryable(err) || attempts == MaxAttempts {
			break
		}
		wait := c.backoff(attempts, retryAfter)
		if req.OnWait != nil {
			req.OnWait(Wait{Attempt: attempts, Delay: wait, Asked: retryAfter, Err: maskKey(err, key)})
		}
		if err := c.Sleep(ctx, wait); err != nil {
			return Response{}, maskKey(err, key)
		}
	}
	return Response{}, maskKey(withAttempts(lastErr, attempts), key)
}

// withAttempts records how many attempts a failed request took.
func withAttempts(err error, attempts int) error {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		apiErr.Attempts = attempts
		return err
	}
	if attempts > 1 {
		return fmt.Errorf("%w (after %d attempts)", err, attempts)
	}
	return err
}

func retryable(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Retryable()
	}
	// A connection refused or reset, or a stream cut: the request may be
	// tried again (a cut is a 5xx in all but name).
	return true
}

// backoff returns the wait before attempt+1: Retry-After when the server gave
// one (0 included) up to MaxBackoff, else BaseBackoff doubled per attempt
// plus jitter.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter >= 0 {
		return min(retryAfter, c.MaxBackoff)
	}
	d := c.BaseBackoff << (attempt - 1)
	if d > c.MaxBackoff {
		d = c.MaxBackoff
	}
	if c.Jitter != nil && d > 0 {
		d += c.Jitter(d / 4)
	}
	return d
}

// noRetryAfter is an answer without a Retry-After: the backoff decides.
const noRetryAfter time.Duration = -1

// parseRetryAfter reads Retry-After as seconds or as an HTTP date; 0 (retry
// at once) is honoured as given, and an absent or unreadable value is
// noRetryAfter.
func (c *Client) parseRetryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return noRetryAfter
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs < 0 {
			return noRetryAfter
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(c.Now()); d > 0 {
			return d
		}
		return 0
	}
	return noRetryAfter
}

func (c *Client) endpoint(path string) string {
	return c.baseURL.String() + path
}

func (c *Client) newRequest(ctx context.Context, method, path, key string, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path), r)
	if err != nil {
		return nil, fmt.Errorf("make the openrouter request (check INVISIBLE_DOTS_OPENROUTER_URL): %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.official {
		req.Header.Set("HTTP-Referer", refererHeader)
		req.Header.Set("X-Title", titleHeader)
	}
	return req, nil
}

// attempt makes one try; retryAfter is the server's Retry-After.
func (c *Client) attempt(ctx context.Context, key string, body []byte) (resp Response, retryAfter time.Duration, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hreq, err := c.newRequest(ctx, http.MethodPost, "/chat/completions", key, body)
	if err != nil {
		return Response{}, noRetryAfter, err
	}
	hreq.Header.Set("Accept", "text/event-stream")
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return Response{}, noRetryAfter, fmt.Errorf("reach openrouter: %w", err)
	}
	defer hresp.Body.Close()
	if hresp.StatusCode != http.StatusOK {
		return Response{}, c.parseRetryAfter(hresp.Header.Get("Retry-After")), apiErrorOf(hresp)
	}

	// A stall is a stream that sends nothing for StreamIdleTimeout; the timer
	// is pushed back by every line read.
	stalled := errors.New("stalled")
	var idle *time.Timer
	if c.StreamIdleTimeout > 0 {
		idle = time.AfterFunc(c.StreamIdleTimeout, func() { cancel(stalled) })
		defer idle.Stop()
	}

	acc := newAssembler()
	sc := bufio.NewScanner(hresp.Body)
	// The buffer starts at the scanner's own size and grows to the longest
	// line; a 64 KiB one made for every request was most of what a short
	// answer allocated.
	sc.Buffer(nil, 16*1024*1024)
	var data strings.Builder
	done := false
	for !done && sc.Scan() {
		if idle != nil {
			idle.Reset(c.StreamIdleTimeout)
		}
		line := sc.Text()
		switch {
		case line == "":
			// End of one event.
			if data.Len() == 0 {
				continue
			}
			payload := data.String()
			data.Reset()
			if payload == "[DONE]" {
				done = true
				continue
			}
			if err := acc.add([]byte(payload)); err != nil {
				return Response{}, noRetryAfter, err
			}
		case strings.HasPrefix(line, ":"):
			// OpenRouter's keep-alive comment (": OPENROUTER PROCESSING").
		case strings.HasPrefix(line, "data:"):
			v := strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(v)
		default:
			// event:, id:, retry: carry nothing this client uses.
		}
	}
	if done {
		drainAfterDone(hresp, cancel)
	}
	// A last event without its blank line.
	if !done && data.Len() > 0 {
		payload := data.String()
		if payload == "[DONE]" {
			done = true
		} else if err := acc.add([]byte(payload)); err != nil {
			return Response{}, noRetryAfter, err
		}
	}
	// A response is whole when the stream said [DONE], or when both the
	// finish reason and the usage (which follows it) arrived: a stream that
	// ends anywhere before that, cleanly or not, was cut.
	whole := done || acc.finish != "" && acc.sawUsage
	if err := sc.Err(); err != nil && !whole {
		if errors.Is(context.Cause(ctx), stalled) {
			return Response{}, noRetryAfter, fmt.Errorf("%w: nothing arrived for %s", ErrStreamCut, c.StreamIdleTimeout)
		}
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return Response{}, noRetryAfter, ctx.Err()
		}
		return Response{}, noRetryAfter, fmt.Errorf("%w: %v", ErrStreamCut, err)
	}
	if acc.finish == "error" {
		// A provider that failed mid-way without an error chunk.
		return Response{}, noRetryAfter, &APIError{InStream: true, Message: "the provider ended the response with an error"}
	}
	if acc.finish == "" {
		// The usage chunk follows the finish chunk; a stream that ended
		// without a finish reason was cut, whatever it carried.
		return Response{}, noRetryAfter, ErrStreamCut
	}
	if !whole {
		return Response{}, noRetryAfter, fmt.Errorf("%w: it ended after the finish reason but before the usage and [DONE]", ErrStreamCut)
	}
	return acc.response(), noRetryAfter, nil
}

// What drainAfterDone reads of a stream after its [DONE], at most.
const (
	drainMax  = 4 << 10
	drainWait = 50 * time.Millisecond
)

// errDrainWait ends a drain that waited drainWait.
var errDrainWait = errors.New("the stream did not end after [DONE]")

// drainAfterDone reads an HTTP/1.x stream from its [DONE] to its end (the
// chunked body's last chunk), so that its connection goes back to the pool
// for the next request: an HTTP/1.x body closed before its end closes its
// connection, and every request then dialed again (and shook hands again
// over TLS). A server that sends more than drainMax after [DONE], or does
// not end the stream within drainWait, has its connection closed, as every
// connection was before. HTTP/2 needs none of this: its streams end without
// ending their connection. cancel ends the attempt's context, which stops
// the read.
func drainAfterDone(hresp *http.Response, cancel context.CancelCauseFunc) {
	if hresp.ProtoMajor != 1 {
		return
	}
	stop := time.AfterFunc(drainWait, func() { cancel(errDrainWait) })
	defer stop.Stop()
	_, _ = io.CopyN(io.Discard, hresp.Body, drainMax)
}

func apiErrorOf(hresp *http.Response) *APIError {
	raw, _ := io.ReadAll(io.LimitReader(hresp.Body, 64*1024))
	e := &APIError{Status: hresp.StatusCode}
	var body struct {
		Error *wireError `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != nil {
		e.Message, e.Code = body.Error.text()
	}
	if e.Message == "" {
		e.Message = strings.TrimSpace(string(raw))
		if len(e.Message) > 500 {
			e.Message = e.Message[:500] + "…"
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(hresp.StatusCode)
	}
	return e
}

// maskKey keeps the key out of an error whatever carried it (a server echoing
// the Authorization header, a URL with credentials).
func maskKey(err error, key string) error {
	if err == nil || key == "" || !strings.Contains(err.Error(), key) {
		return err
	}
	return &maskedError{msg: strings.ReplaceAll(err.Error(), key, "***"), err: err}
}

type maskedError struct {
	msg string
	err error
}

func (e *maskedError) Error() string { return e.msg }

// Unwrap keeps errors.Is and errors.As working (ErrStreamCut, *APIError);
// the wrapped error's own text is never printed by this one.
func (e *maskedError) Unwrap() error { return e.err }

// Limits is what a model can do, from the providers OpenRouter lists for it.
type Limits struct {
	// ContextLength is the widest window among the providers.
	ContextLength int
	// MaxCompletionTokens is the longest answer among the providers of that
	// window (the window itself when none of them states one).
	MaxCompletionTokens int
	// Providers are the slugs of the providers of that window, for
	// provider.only. Empty for a router, which lists no provider: then there
	// are no limits and no route.
	Providers []string
}

// MaxTokensFor returns max_tokens for a prompt of promptTokens: the longest
// answer, or what the window leaves after the prompt and a margin when that
// is less; 0 (send none) when the limits are unknown. The margin
// (WindowMargin) covers what a prompt's measure misses: the engine measures
// what it added since the provider's last count, and tokenizers differ.
func (l Limits) MaxTokensFor(promptTokens int) int {
	if l.ContextLength <= 0 {
		return 0
	}
	n := l.MaxCompletionTokens
	if left := l.ContextLength - promptTokens - WindowMargin(l.ContextLength); left < n {
		n = left
	}
	if n < 1 {
		n = 1
	}
	return n
}

// WindowMargin is the room max_tokens leaves unasked in a window of
// contextLength: 2 %, at least 256 tokens.
func WindowMargin(contextLength int) int {
	return max(contextLength/50, 256)
}

// ModelLimits reads the model's limits from GET /models/{model}/endpoints
// (ref 8.5): called at the start of every turn, since OpenRouter changes a
// model's providers while an engine runs for weeks. A model OpenRouter does
// not know is ErrUnknownModel.
func (c *Client) ModelLimits(ctx context.Context, key, model string) (Limits, error) {
	if model == "" || strings.Contains(model, "..") || strings.ContainsAny(model, "?#") {
		return Limits{}, fmt.Errorf("model id %q is not a valid openrouter model id", model)
	}
	path := "/models/" + (&url.URL{Path: model}).EscapedPath() + "/endpoints"
	var lastErr error
	attempt := 0
	for attempt < MaxAttempts {
		attempt++
		limits, retryAfter, err := c.modelLimitsOnce(ctx, key, path, model)
		if err == nil {
			return limits, nil
		}
		lastErr = err
		if ctx.Err() != nil || !retryable(err) || errors.Is(err, ErrUnknownModel) || attempt == MaxAttempts {
			break
		}
		if err := c.Sleep(ctx, c.backoff(attempt, retryAfter)); err != nil {
			return Limits{}, maskKey(err, key)
		}
	}
	return Limits{}, maskKey(withAttempts(lastErr, attempt), key)
}

func (c *Client) modelLimitsOnce(ctx context.Context, key, path, model string) (Limits, time.Duration, error) {
	hreq, err := c.newRequest(ctx, http.MethodGet, path, key, nil)
	if err != nil {
		return Limits{}, noRetryAfter, err
	}
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return Limits{}, noRetryAfter, fmt.Errorf("reach openrouter for the limits of %s: %w", model, err)
	}
	defer hresp.Body.Close()
	if hresp.StatusCode == http.StatusNotFound {
		return Limits{}, noRetryAfter, fmt.Errorf("%w: %s (check model.id in the Dot's config)", ErrUnknownModel, model)
	}
	if hresp.StatusCode != http.StatusOK {
		return Limits{}, c.parseRetryAfter(hresp.Header.Get("Retry-After")), apiErrorOf(hresp)
	}
	var body struct {
		Data *struct {
			Endpoints []struct {
				Name                string `json:"name"`
				ProviderName        string `json:"provider_name"`
				Tag                 string `json:"tag"`
				ContextLength       *int   `json:"context_length"`
				MaxCompletionTokens *int   `json:"max_completion_tokens"`
			} `json:"endpoints"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(hresp.Body, 8*1024*1024)).Decode(&body); err != nil {
		return Limits{}, noRetryAfter, fmt.Errorf("read the endpoints openrouter lists for %s: %w", model, err)
	}
	if body.Data == nil {
		return Limits{}, noRetryAfter, fmt.Errorf("%w: %s (check model.id in the Dot's config)", ErrUnknownModel, model)
	}
	var l Limits
	for _, ep := range body.Data.Endpoints {
		if ep.ContextLength == nil || *ep.ContextLength <= 0 {
			continue
		}
		if *ep.ContextLength > l.ContextLength {
			l = Limits{ContextLength: *ep.ContextLength}
		}
		if *ep.ContextLength < l.ContextLength {
			continue
		}
		answer := *ep.ContextLength
		if ep.MaxCompletionTokens != nil && *ep.MaxCompletionTokens > 0 && *ep.MaxCompletionTokens < answer {
			answer = *ep.MaxCompletionTokens
		}
		if answer > l.MaxCompletionTokens {
			l.MaxCompletionTokens = answer
		}
		slug := ep.Tag
		if slug == "" {
			slug = strings.ToLower(ep.ProviderName)
		}
		if slug != "" && !contains(l.Providers, slug) {
			l.Providers = append(l.Providers, slug)
		}
	}
	return l, noRetryAfter, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
