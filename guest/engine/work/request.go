package work

import (
	"context"
	"fmt"
	"strings"
	"time"

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

// estimateTokens is a cheap measure of a request: about four characters a
// token, plus a little per message. It errs on the large side for prose,
// which is the safe side of a window.
func estimateTokens(msgs []openrouter.Message, tools []openrouter.ToolDef) int {
	n := 0
	for _, m := range msgs {
		n += 4 + len(m.Content)/4 + imageTokens*len(m.ImageURLs)
		for _, c := range m.ToolCalls {
			n += 4 + (len(c.Name)+len(c.Arguments))/4
		}
	}
	for _, t := range tools {
		n += 8 + (len(t.Name)+len(t.Description)+len(t.Parameters))/4
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

func (e *Engine) systemPrompt(ctx context.Context, l limits) string {
	if e.mem != nil {
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

func (e *Engine) loadThread(ctx context.Context, session string) (thread, error) {
	var th thread
	err := e.st.Read(ctx, func(q store.Querier) error {
		summary, upto, err := sessionSummary(ctx, q, session)
		if err != nil {
			return err
		}
		th.summary = summary
		th.msgs, err = loadMessages(ctx, q, session, upto)
		return err
	})
	return th, err
}

func renderMessages(system string, th thread) []openrouter.Message {
	out := []openrouter.Message{{Role: "system", Content: system}}
	if th.summary != "" {
		out = append(out, openrouter.Message{Role: "user", Content: summaryPrefix + th.summary})
	}
	for _, m := range th.msgs {
		om := openrouter.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
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
	system := e.systemPrompt(ctx, l)
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
	if budget > 0 && estimateTokens(msgs, defs) > budget {
		if cleared, err := e.clearOldResults(ctx, t.session, th); err != nil {
			return openrouter.Request{}, err
		} else if cleared {
			if th, err = e.loadThread(ctx, t.session); err != nil {
				return openrouter.Request{}, err
			}
			msgs = renderMessages(system, th)
		}
	}
	if budget > 0 && estimateTokens(msgs, defs) > budget {
		if err := e.summarize(ctx, t, l, th); err != nil {
			return openrouter.Request{}, err
		}
		if th, err = e.loadThread(ctx, t.session); err != nil {
			return openrouter.Request{}, err
		}
		msgs = renderMessages(system, th)
	}
	shown := t.shownImages()
	if budget > 0 {
		fitLatestRound(msgs, defs, budget-imageTokens*len(shown))
	}
	msgs = withImages(msgs, shown)
	return openrouter.Request{
		Model:        l.cfg.Model.ID,
		Messages:     msgs,
		Tools:        defs,
		MaxTokens:    l.model.MaxTokensFor(estimateTokens(msgs, defs)),
		ProviderOnly: l.model.Providers,
	}, nil
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
		size := len(m.Content) / 4
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
	for len(lines) > 1 && (len(strings.Join(lines, "\n"))/4) > budget {
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
	return e.st.Write(ctx, "summary", func(tx *store.Tx) error {
		if err == nil {
			if err := addSpend(ctx, tx, t.session, resp.Usage.CostUSD); err != nil {
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
		if size+len(m.Content)/4 > keepPersonTokens {
			break
		}
		size += len(m.Content) / 4
		kept = append(kept, fmt.Sprintf("- (%s) %s", m.At.UTC().Format(time.RFC3339), m.Content))
	}
	if len(kept) == 0 {
		return ""
	}
	return "\n\nThe person's latest messages, newest first, as they wrote them:\n" + strings.Join(kept, "\n")
}

// fitLatestRound cuts the results of the latest round of calls, for this
// request only, to what the window leaves, saying how much came through.
func fitLatestRound(msgs []openrouter.Message, defs []openrouter.ToolDef, budget int) {
	over := estimateTokens(msgs, defs) - budget
	if over <= 0 {
		return
	}
	start := len(msgs)
	for start > 0 && msgs[start-1].Role == "tool" {
		start--
	}
	for i := len(msgs) - 1; i >= start && over > 0; i-- {
		content := msgs[i].Content
		cut := over*4 + 200
		if cut >= len(content) {
			cut = len(content)
		}
		keep := len(content) - cut
		msgs[i].Content = content[:keep] + fmt.Sprintf("\n[Cut to fit the context window: %d of %d characters came through. Ask for less (a narrower range, a filter).]", keep, len(content))
		over -= cut / 4
	}
}
