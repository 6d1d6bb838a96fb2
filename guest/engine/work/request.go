package work

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/invisible-dots/invisible-dots/guest/engine/openrouter"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
)

// Compaction figures (ref 8.6).
const (
	answerRoomTokens   = 20000 // room kept for the answer, or the model's longest answer when shorter
	keepResultsTokens  = 40000 // newest tool results kept when clearing
	minClearedTokens   = 20000 // clearing is worth it only when it frees this much
	keepPersonTokens   = 20000 // the person's latest messages kept after a summary
	clearedResultText  = "[This result was cleared to save room in the context. Call the tool again if you need it.]"
	summaryPrefix      = "[Summary of the earlier conversation, written for you to resume the work]\n"
	summaryInstruction = `You write a handoff summary for the model that resumes this work. It will see only your summary and the messages after it.
Write under these headings:
## USER_CONTEXT (who the person is, what they asked, preferences)
## COMPLETED (what was done, with results)
## PENDING (what is left)
## CURRENT_STATE (files, commands, services as they are now)
## APPROVALS (calls that waited for the person, and their decisions)
## FILES (paths created or changed)
Be factual and complete; do not invent.`
)

// imageTokens is what one image shown to the model is counted as: a
// screenshot of at most images.MaxSide costs a model about this much.
const imageTokens = 1600

// imagesText opens the message that shows the turn's newest images.
const imagesText = "[The newest images your calls answered with in this turn, oldest first. They are not kept: a later turn sees only their placeholders.]"

// estimateTokens is a cheap measure of a request (textTokens of every text
// it carries, plus a little per message). It errs on the large side, which
// is the safe side of a window; measureRequest prefers the provider's count.
func estimateTokens(msgs []openrouter.Message, tools []openrouter.ToolDef) int {
	n := 0
	for _, m := range msgs {
		n += 4 + textTokens(m.Content) + imageTokens*len(m.ImageURLs)
		// Reasoning sent back counts toward the prompt; an encrypted block
		// is dense text.
		n += textTokens(m.Reasoning) + textTokens(string(m.ReasoningDetails))
		for _, c := range m.ToolCalls {
			n += 4 + textTokens(c.Name) + textTokens(c.Arguments)
		}
	}
	for _, t := range tools {
		n += 8 + textTokens(t.Name) + textTokens(t.Description) + textTokens(string(t.Parameters))
	}
	return n
}

func toolDefs(tools []Tool) []openrouter.ToolDef {
	out := make([]openrouter.ToolDef, 0, len(tools))
	for _, t := range tools {
		out = append(out, openrouter.ToolDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return out
}

func (e *Engine) systemPrompt(ctx context.Context, t *turn, l limits) string {
	if e.mem != nil {
		if read := t.prompt; read != nil {
			t.prompt = nil
			return read()(l.cfg, l.offered, e.now())
		}
		return e.mem.SystemPrompt(ctx, l.cfg, l.offered, e.now())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "You are %s, a Dot: a persistent agent that owns a computer.\n", l.cfg.Name)
	if l.cfg.Instructions != "" {
		b.WriteString("\n" + l.cfg.Instructions + "\n")
	}
	fmt.Fprintf(&b, "\nToday is %s.\n", e.now().UTC().Format("Monday 2 January 2006"))
	return b.String()
}

// thread is a session's context: its summary and the messages after it.
type thread struct {
	summary string
	msgs    []Message
}

// chatThread is the chat's messages after its summary, kept between
// requests (msgTail) while the summary stays the same, and the summary. A
// stored message changes only by being cleared (clearOldResults, which
// forgets what is kept); a new summary moves upto, which makes the next read
// whole again.
type chatThread struct {
	tail msgTail
	// summary and upto are the chat's row of sessions as last read, kept
	// while known: only summarize writes that row, and it forgets them.
	mu      sync.Mutex
	known   bool
	summary string
	upto    int64
}

// head returns the chat's summary and the last message id it covers.
func (c *chatThread) head(ctx context.Context, q querier) (string, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known {
		summary, upto, err := sessionSummary(ctx, q, chatSession)
		if err != nil {
			return "", 0, err
		}
		c.summary, c.upto, c.known = summary, upto, true
	}
	return c.summary, c.upto, nil
}

// load returns the chat's messages after upto, the summary's last id.
func (c *chatThread) load(ctx context.Context, q querier, upto int64) ([]Message, error) {
	read := func(after int64) ([]Message, error) { return loadMessages(ctx, q, chatSession, after) }
	// What is kept, not a copy: loadThread copies it before it rewrites a
	// line in it, which few threads need.
	return c.tail.load(upto, upto, func() ([]Message, error) { return read(upto) }, read)
}

// forget drops what is kept (a message or the summary changed).
func (c *chatThread) forget() {
	c.tail.forget()
	c.mu.Lock()
	c.known = false
	c.mu.Unlock()
}

func (e *Engine) loadThread(ctx context.Context, session string) (thread, error) {
	var th thread
	err := e.st.Read(ctx, func(q store.Querier) error {
		var summary string
		var upto int64
		var err error
		if session == chatSession {
			summary, upto, err = e.chatThread.head(ctx, q)
		} else {
			summary, upto, err = sessionSummary(ctx, q, session)
		}
		if err != nil {
			return err
		}
		th.summary = summary
		if session == chatSession {
			th.msgs, err = e.chatThread.load(ctx, q, upto)
		} else {
			th.msgs, err = loadMessages(ctx, q, session, upto)
		}
		if err != nil {
			return err
		}
		copied := false
		for i, m := range th.msgs {
			if m.Role != "user" || m.InboundID != "" {
				continue
			}
			text, ok, err := approvalForModel(ctx, q, m.Content)
			if err != nil {
				return err
			}
			if ok {
				if !copied {
					// The chat's messages are chatThread's own.
					th.msgs, copied = slices.Clone(th.msgs), true
				}
				th.msgs[i].Content = text
			}
		}
		return nil
	})
	return th, err
}

func renderMessages(system string, th thread) []openrouter.Message {
	out := make([]openrouter.Message, 0, 2+len(th.msgs))
	out = append(out, openrouter.Message{Role: "system", Content: system})
	if th.summary != "" {
		out = append(out, openrouter.Message{Role: "user", Content: summaryPrefix + th.summary})
	}
	for _, m := range th.msgs {
		om := openrouter.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID,
			Reasoning: m.Reasoning, ReasoningDetails: m.ReasoningDetails}
		if m.Cleared {
			om.Content = clearedResultText
		}
		for _, c := range m.ToolCalls {
			om.ToolCalls = append(om.ToolCalls, openrouter.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		out = append(out, om)
	}
	return out
}

// buildRequest makes the turn's next request, compacting the thread first
// when it does not fit the model's window (ref 8.6): old tool results
// cleared, then a summary, then the latest round's results cut for this
// request only.
func (e *Engine) buildRequest(ctx context.Context, t *turn, l limits) (openrouter.Request, error) {
	system := e.systemPrompt(ctx, t, l)
	defs := toolDefs(l.offered)
	th, err := e.loadThread(ctx, t.session)
	if err != nil {
		return openrouter.Request{}, err
	}
	msgs := renderMessages(system, th)
	budget := 0
	if l.model.ContextLength > 0 {
		room := answerRoomTokens
		if l.model.MaxCompletionTokens > 0 && l.model.MaxCompletionTokens < room {
			room = l.model.MaxCompletionTokens
		}
		budget = l.model.ContextLength - room
	}
	// size is the measure of msgs (measureRequest) and est their estimate
	// (estimateTokens), each taken once for each msgs: they read the whole
	// thread, the tools and the system prompt, and were taken up to five
	// times for one request. Whatever changes msgs sets both back to -1.
	size, est := -1, -1
	estimate := func() int {
		if est < 0 {
			est = estimateTokens(msgs, defs)
		}
		return est
	}
	measure := func() int {
		if size < 0 {
			size = measureEstimated(t.counted, estimate(), msgs)
		}
		return size
	}
	force := t.compact
	t.compact = false
	if force || budget > 0 && measure() > budget {
		if cleared, err := e.clearOldResults(ctx, t.session, th); err != nil {
			return openrouter.Request{}, err
		} else if cleared {
			if th, err = e.loadThread(ctx, t.session); err != nil {
				return openrouter.Request{}, err
			}
			msgs, size, est = renderMessages(system, th), -1, -1
		}
	}
	if force || budget > 0 && measure() > budget {
		if err := e.summarize(ctx, t, l, th); err != nil {
			return openrouter.Request{}, err
		}
		if th, err = e.loadThread(ctx, t.session); err != nil {
			return openrouter.Request{}, err
		}
		msgs, size, est = renderMessages(system, th), -1, -1
	}
	shown := t.shownImages()
	if budget > 0 && fitEstimated(msgs, defs, budget-imageTokens*len(shown), estimate()) {
		size, est = -1, -1
	}
	if len(shown) > 0 {
		msgs, size, est = withImages(msgs, shown), -1, -1
	}
	return openrouter.Request{
		Model:           l.cfg.Model.ID,
		Messages:        msgs,
		Tools:           defs,
		MaxTokens:       l.model.MaxTokensFor(measure()),
		ProviderOnly:    l.model.Providers,
		ReasoningEffort: l.cfg.Model.Reasoning,
	}, nil
}

// countedRequest is a request the provider answered, with the prompt size it
// reported (usage.prompt_tokens).
type countedRequest struct {
	msgs         []openrouter.Message
	tools        []openrouter.ToolDef
	promptTokens int
}

// measureRequest is the size of a request in tokens: the provider's count of
// the turn's last request plus an estimate of what changed since, when the
// last request's messages (after its system prompt, images aside) open this
// one; the estimate of the whole otherwise (a first request, a compacted
// thread). The provider counts with the model's own tokenizer, which no
// estimate matches on code, JSON, base64 or CJK text (ref 8.6: "the
// provider's reported usage when it matches").
func measureRequest(last *countedRequest, msgs []openrouter.Message, tools []openrouter.ToolDef) int {
	return measureEstimated(last, estimateTokens(msgs, tools), msgs)
}

// measureEstimated is measureRequest of msgs whose estimate (with the
// tools) is est.
func measureEstimated(last *countedRequest, est int, msgs []openrouter.Message) int {
	if last == nil || last.promptTokens <= 0 || !opens(last.msgs, msgs) {
		return est
	}
	added := est - estimateTokens(last.msgs, last.tools)
	if added < 0 {
		added = 0
	}
	return last.promptTokens + added
}

// opens reports whether the messages of prev after its system prompt begin
// next's, the turn's images (shown again, in another place, by every
// request) aside.
func opens(prev, next []openrouter.Message) bool {
	p, n := withoutImages(prev), withoutImages(next)
	if len(p) == 0 || len(n) < len(p) {
		return false
	}
	for i := 1; i < len(p); i++ {
		a, b := p[i], n[i]
		if a.Role != b.Role || a.Content != b.Content || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) {
			return false
		}
		for j := range a.ToolCalls {
			if a.ToolCalls[j] != b.ToolCalls[j] {
				return false
			}
		}
	}
	return true
}

func withoutImages(msgs []openrouter.Message) []openrouter.Message {
	out := make([]openrouter.Message, 0, len(msgs))
	for _, m := range msgs {
		if len(m.ImageURLs) == 0 {
			out = append(out, m)
		}
	}
	return out
}

// contextLengthRe is how OpenRouter words a request longer than the window
// ("This endpoint's maximum context length is 8192 tokens. However, you
// requested about 9000 tokens ...").
var contextLengthRe = regexp.MustCompile(`maximum context length is (\d+) tokens`)

// contextLengthRefusal reports a request the provider refused as longer than
// the model's window, and that window.
func contextLengthRefusal(err error) (int, bool) {
	var apiErr *openrouter.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
		return 0, false
	}
	m := contextLengthRe.FindStringSubmatch(apiErr.Message)
	if m == nil {
		if apiErr.Code == "context_length_exceeded" {
			return 0, true
		}
		return 0, false
	}
	n, _ := strconv.Atoi(m[1])
	return n, true
}

// withImages adds the turn's newest images in one user message right after
// the last tool message (ref 6): a tool message cannot carry an image part.
func withImages(msgs []openrouter.Message, urls []string) []openrouter.Message {
	if len(urls) == 0 {
		return msgs
	}
	at := len(msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "tool" {
			at = i + 1
			break
		}
	}
	m := openrouter.Message{Role: "user", Content: imagesText, ImageURLs: urls}
	return append(msgs[:at:at], append([]openrouter.Message{m}, msgs[at:]...)...)
}

// clearOldResults keeps the newest keepResultsTokens of tool results and
// clears the older ones, when that frees minClearedTokens or more.
func (e *Engine) clearOldResults(ctx context.Context, session string, th thread) (bool, error) {
	kept, freed := 0, 0
	var ids []int64
	for i := len(th.msgs) - 1; i >= 0; i-- {
		m := th.msgs[i]
		if m.Role != "tool" || m.Cleared {
			continue
		}
		size := textTokens(m.Content)
		if kept+size <= keepResultsTokens {
			kept += size
			continue
		}
		kept = keepResultsTokens // once over, every older result goes
		freed += size
		ids = append(ids, m.ID)
	}
	if freed < minClearedTokens {
		return false, nil
	}
	if session == chatSession {
		// Whether or not the write commits, what is kept may be stale.
		defer e.chatThread.forget()
	}
	err := e.st.Write(ctx, "clear-results", func(tx *store.Tx) error {
		for _, id := range ids {
			if _, err := tx.Exec(ctx, "UPDATE messages SET cleared = 1 WHERE id = ?", id); err != nil {
				return fmt.Errorf("clear result %d: %w", id, err)
			}
		}
		return nil
	})
	return err == nil, err
}

// summarize replaces the thread with a summary by the summary model (no
// tools), keeping the person's latest messages as they wrote them. Its cost
// counts toward the session's cap. When the model cannot summarize, the
// messages themselves, up to half the budget, are the summary.
func (e *Engine) summarize(ctx context.Context, t *turn, l limits, th thread) error {
	if len(th.msgs) == 0 {
		return nil
	}
	model := l.cfg.Model.ID
	if m := l.cfg.Models["summary"]; m != "" {
		model = m
	}
	sl := l.model
	if model != l.cfg.Model.ID {
		if got, err := e.model.ModelLimits(t.req, l.key, model); err == nil {
			sl = got
		}
	}
	budget := sl.ContextLength - answerRoomTokens
	if budget <= 0 {
		budget = 1 << 30
	}
	// Oldest messages go first when the thread is too long for the summary
	// model, each with the results of its calls.
	lines := transcriptLines(th)
	for len(lines) > 1 && textTokens(strings.Join(lines, "\n")) > budget {
		lines = lines[1:]
	}
	body := strings.Join(lines, "\n")
	if th.summary != "" {
		body = "Earlier summary:\n" + th.summary + "\n\nConversation since:\n" + body
	}
	req := openrouter.Request{Model: model, Messages: []openrouter.Message{
		{Role: "system", Content: summaryInstruction},
		{Role: "user", Content: body},
	}}
	if sl.ContextLength > 0 {
		req.MaxTokens = sl.MaxTokensFor(estimateTokens(req.Messages, nil))
		req.ProviderOnly = sl.Providers
	}
	resp, err := e.model.Complete(t.req, l.key, req)
	summary := strings.TrimSpace(resp.Content)
	if err != nil || summary == "" || resp.Cut() {
		if out, ok := e.interrupted(t); ok && out >= 0 {
			return fmt.Errorf("summary abandoned: %w", errStopping)
		}
		half := budget / 2 * 4
		if len(body) > half {
			body = body[len(body)-half:]
		}
		summary = body
	}
	summary += personTail(th)
	last := th.msgs[len(th.msgs)-1].ID
	if t.session == chatSession {
		// Whether or not the write commits, the summary kept may be stale.
		defer e.chatThread.forget()
	}
	return e.st.Write(ctx, "summary", func(tx *store.Tx) error {
		if err == nil {
			if err := addSpend(ctx, tx, t.session, resp.Usage.CostUSD, resp.Usage.ReasoningTokens); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO sessions(id, summary, summary_upto) VALUES (?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET summary = excluded.summary, summary_upto = excluded.summary_upto`, t.session, summary, last)
		if err != nil {
			return fmt.Errorf("store summary of %s: %w", t.session, err)
		}
		return nil
	})
}

func transcriptLines(th thread) []string {
	var out []string
	for _, m := range th.msgs {
		switch m.Role {
		case "user":
			out = append(out, "USER: "+m.Content)
		case "assistant":
			line := "ASSISTANT: " + m.Content
			for _, c := range m.ToolCalls {
				line += fmt.Sprintf("\n  CALL %s %s", c.Name, c.Arguments)
			}
			out = append(out, line)
		case "tool":
			content := m.Content
			if m.Cleared {
				content = clearedResultText
			}
			out = append(out, fmt.Sprintf("RESULT of %s: %s", m.ToolName, content))
		}
	}
	return out
}

// personTail keeps the person's latest messages as they wrote them, newest
// first up to keepPersonTokens, after the summary.
func personTail(th thread) string {
	var kept []string
	size := 0
	for i := len(th.msgs) - 1; i >= 0; i-- {
		m := th.msgs[i]
		if m.Role != "user" || m.InboundID == "" {
			continue
		}
		n := textTokens(m.Content)
		if size+n > keepPersonTokens {
			break
		}
		size += n
		kept = append(kept, fmt.Sprintf("- (%s) %s", m.At.UTC().Format(time.RFC3339), m.Content))
	}
	if len(kept) == 0 {
		return ""
	}
	return "\n\nThe person's latest messages, newest first, as they wrote them:\n" + strings.Join(kept, "\n")
}

// fitLatestRound cuts the results of the latest round of calls, for this
// request only, to what the window leaves, saying how much came through. It
// reports whether it cut any.
func fitLatestRound(msgs []openrouter.Message, defs []openrouter.ToolDef, budget int) bool {
	return fitEstimated(msgs, defs, budget, estimateTokens(msgs, defs))
}

// fitEstimated is fitLatestRound of msgs whose estimate (with defs) is est.
func fitEstimated(msgs []openrouter.Message, defs []openrouter.ToolDef, budget, est int) bool {
	over := est - budget
	if over <= 0 {
		return false
	}
	start := len(msgs)
	for start > 0 && msgs[start-1].Role == "tool" {
		start--
	}
	for i := len(msgs) - 1; i >= start && over > 0; i-- {
		content := msgs[i].Content
		// Cut by the result's own bytes a token, a little more than over,
		// and measure again: the marker costs tokens too.
		keep := len(content)
		for keep > 0 {
			perToken := float64(keep) / float64(max(textTokens(content[:keep]), 1))
			keep -= int(float64(over+64)*perToken) + 1
			if keep < 0 {
				keep = 0
			}
			for keep > 0 && !utf8.RuneStart(content[keep]) {
				keep--
			}
			msgs[i].Content = content[:keep] + fmt.Sprintf("\n[Cut to fit the context window: %d of %d characters came through. Ask for less (a narrower range, a filter).]", keep, len(content))
			if estimateTokens(msgs, defs) <= budget {
				break
			}
		}
		over = estimateTokens(msgs, defs) - budget
	}
	return true
}
