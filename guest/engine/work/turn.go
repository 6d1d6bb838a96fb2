package work

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/invisible-dots/invisible-dots/guest/engine/images"
	"github.com/invisible-dots/invisible-dots/guest/engine/openrouter"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

var (
	errTaskCancelled = errors.New("the task was cancelled")
	errStopping      = errors.New("the engine is stopping")
)

// turn is one running unit of work of a session.
type turn struct {
	session, taskID, kind string

	ctx    context.Context // tools run under it; cancelled at the grace deadline
	cancel context.CancelCauseFunc
	req    context.Context // model requests; cancelled at once on a stop
	reqEnd context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	executing bool
	stopped   bool
	// images are the newest images the turn's calls answered with (data:
	// URLs), at most images.PerTurn, oldest first: each request of the turn
	// shows them; they are never stored (ref 6 "Screenshots").
	images []string
	// counted is the turn's last request with the prompt size the provider
	// reported for it: the next request is measured from it (measureRequest).
	// Only the turn's goroutine touches it.
	counted *countedRequest
	// compact asks the next request to compact the thread whatever it
	// measures: the provider refused the last one as longer than its window.
	compact bool
	// taint is the session's taint (taint.go), read when the turn opens and
	// kept by the turn's goroutine as its calls taint it.
	taint taintState
	// opened says the turn's opening committed before it started: the
	// chat's turn that Accept opened with the message (openOnAccept).
	opened bool
	// limits, when set, waits for the model's limits (readModelLimits)
	// read with limitsKey for limitsModel: Accept starts the read as it
	// opens the turn, so that it runs while the opening commits.
	limits                 func() (openrouter.Limits, error)
	limitsKey, limitsModel string
	// prompt, when set, waits for what the system prompt shows of the
	// Dot's files, read as the turn opened (readPrompt); the turn's first
	// request builds its prompt from it, and every later one reads again.
	prompt func() PromptBuilder

	// ended is set, under the engine's mu, by the transaction that ends the
	// turn (endTurn): from then on the turn is not counted as running,
	// though it holds its session until its goroutine is done (its
	// conversation file written). stateBeforeEnd and endState are the state
	// before and after that transaction, for reopen.
	ended                    bool
	stateBeforeEnd, endState protocol.AgentState
	// writing is set, under the engine's mu, once the turn's end and its
	// state committed: all it does from then on is write its conversation
	// file, so the chat's next turn may be opened over it (openOnAccept);
	// gone once it let go of its session. after is the chat's turn that was
	// writing when this one was opened over it: this one runs once that one
	// is done, so a session's turns still run (and write their files) one
	// at a time.
	writing, gone bool
	after         *turn
}

// offeredTools are the tools the model is offered under cfg: every tool
// whose permission is not deny.
func (e *Engine) offeredTools(cfg protocol.RuntimeConfig) []Tool {
	var out []Tool
	for _, tool := range e.tools.Tools() {
		if tool.offered(cfg) {
			out = append(out, tool)
		}
	}
	return out
}

// addImages keeps the turn's newest images.
func (t *turn) addImages(urls []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.images = append(t.images, urls...)
	if over := len(t.images) - images.PerTurn; over > 0 {
		t.images = append([]string(nil), t.images[over:]...)
	}
}

func (t *turn) shownImages() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.images...)
}

func (t *turn) stop(grace time.Duration) {
	t.mu.Lock()
	t.stopped = true
	executing := t.executing
	t.mu.Unlock()
	t.reqEnd()
	if !executing {
		t.cancel(errStopping)
		return
	}
	time.AfterFunc(grace, func() { t.cancel(errStopping) })
}

func (t *turn) isStopped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped
}

func (t *turn) setExecuting(v bool) {
	t.mu.Lock()
	t.executing = v
	t.mu.Unlock()
}

// outcome is how a turn ended.
type outcome int

const (
	outcomeAnswered  outcome = iota // final answer stored (chat answered, task completed)
	outcomeParked                   // a call waits for approval
	outcomeFailed                   // ended with a failure, recorded
	outcomeCancelled                // the task was cancelled
	outcomeAbandoned                // a stop cut it; given back
	outcomeNothing                  // nothing to do
)

func (e *Engine) startTurn(ctx context.Context, p *plan) {
	t := newTurn(ctx, p)
	e.mu.Lock()
	slot := &e.chat
	if p.taskID != "" {
		slot = &e.task
	}
	if *slot != nil {
		// A turn of the session started meanwhile (Accept opens the chat's
		// turn itself when the chat is free): it does the work.
		e.mu.Unlock()
		t.reqEnd()
		t.cancel(nil)
		return
	}
	*slot = t
	e.mu.Unlock()
	e.launch(t)
}

// newTurn is the turn of p, not started.
func newTurn(ctx context.Context, p *plan) *turn {
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	rctx, rcancel := context.WithCancel(tctx)
	return &turn{session: p.session, taskID: p.taskID, kind: p.kind, ctx: tctx, cancel: cancel, req: rctx, reqEnd: rcancel,
		done: make(chan struct{})}
}

// launch runs t, which holds its session's slot (e.chat or e.task), in a
// goroutine of its own.
func (e *Engine) launch(t *turn) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(t.done)
		defer t.reqEnd()
		if t.after != nil {
			<-t.after.done
			t.after = nil // not a chain of every turn the chat had
		}
		out := e.runTurn(t)
		// The turn's end state is committed before the turn lets go of its
		// session, so no turn started after this one is counted as running
		// when it is computed (usually the transaction that ended the turn
		// committed it already).
		err := e.finishTurn(context.Background(), t)
		if err != nil {
			e.log.Error("record agent state", "err", err)
		}
		if out != outcomeNothing && out != outcomeAbandoned {
			// The chat's next message may open its turn while this file
			// is written (openOnAccept): a message that finds the chat
			// taken waits for the schedule, and its turn's opening is a
			// commit of its own, a third a turn, which every message that
			// came before the file was written paid.
			e.mu.Lock()
			t.writing = err == nil
			e.mu.Unlock()
			// The commit that ended the turn woke the event streams, whose
			// goroutines run on this one's processor once it yields: they
			// send the turn's events (the answer the person waits for)
			// before the file is written, not after it (about 0.1 ms).
			runtime.Gosched()
			e.transcribe(context.WithoutCancel(t.ctx), t)
		}
		e.mu.Lock()
		if e.task == t {
			e.task = nil
		}
		if e.chat == t {
			e.chat = nil
		}
		t.gone = true
		e.mu.Unlock()
		if e.released != nil {
			e.released()
		}
		e.Kick()
	}()
}

// limits is what a turn reads once at its start.
type limits struct {
	cfg     protocol.RuntimeConfig
	key     string
	model   openrouter.Limits
	offered []Tool
}

// runTurn runs t to its end and commits it; the outcome says whether it did
// anything (its conversation file is then written).
func (e *Engine) runTurn(t *turn) outcome {
	ctx := t.ctx
	var err error
	out, reason := e.turnBody(t)
	bg := context.WithoutCancel(ctx)
	// Each transaction that ends the turn records its end state too (a
	// commit less a turn; see endTurn); the answer's transaction already did
	// when it ended the turn.
	switch out {
	case outcomeFailed:
		err = e.st.Write(bg, "fail", func(tx *store.Tx) error {
			if err := e.endFailed(bg, tx, t, reason); err != nil {
				return err
			}
			return e.endTurn(bg, tx, t)
		})
	case outcomeCancelled:
		err = e.st.Write(bg, "cancelled", func(tx *store.Tx) error {
			if err := e.closeOpenCalls(bg, tx, t.session); err != nil {
				return err
			}
			if err := endApprovals(bg, tx, t.session); err != nil {
				return err
			}
			return e.endTurn(bg, tx, t)
		})
	case outcomeAbandoned:
		if t.taskID != "" {
			// The attempt a stop cut is given back (ref 8.7) and the next
			// start says it was interrupted.
			err = e.st.Write(bg, "give-back", func(tx *store.Tx) error {
				if _, err := tx.Exec(bg, `UPDATE dots_tasks SET starts = MAX(starts - 1, 0), interrupted = 1
					WHERE task_id = ? AND status = 'running'`, t.taskID); err != nil {
					return err
				}
				return e.endTurn(bg, tx, t)
			})
		}
	case outcomeAnswered, outcomeParked:
		if !e.hasEnded(t) {
			err = e.st.Write(bg, "turn-end", func(tx *store.Tx) error {
				if err := endApprovals(bg, tx, t.session); err != nil {
					return err
				}
				return e.endTurn(bg, tx, t)
			})
		}
	}
	if err != nil {
		e.reopen(t)
		e.log.Error("end turn", "session", t.session, "err", err)
	}
	return out
}

// hasEnded says whether a transaction that ended t committed.
func (e *Engine) hasEnded(t *turn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return t.ended
}

// endApprovals ends the approvals a turn was telling (ref 8.8: granted or
// told before the turn, done when it ends).
func endApprovals(ctx context.Context, tx *store.Tx, session string) error {
	if _, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = 'done' WHERE session = ? AND status IN ('granted','told')", session); err != nil {
		return fmt.Errorf("end told approvals of %s: %w", session, err)
	}
	return nil
}

func (e *Engine) transcribe(ctx context.Context, t *turn) {
	if e.mem == nil {
		return
	}
	var msgs []Message
	title := "Chat"
	err := e.st.Read(ctx, func(q store.Querier) error {
		var err error
		if t.taskID == "" {
			// The chat's day files from the first day with a message not
			// written yet: reading the whole chat after every turn made a
			// turn's cost grow with the chat's length.
			msgs, err = e.chatDays.load(ctx, q, t.session, e.mem.Transcribed(t.session))
			return err
		}
		msgs, err = loadMessages(ctx, q, t.session, 0)
		if err != nil {
			return err
		}
		if t.taskID != "" {
			var d string
			if err := q.QueryRowContext(ctx, "SELECT description FROM dots_tasks WHERE task_id = ?", t.taskID).Scan(&d); err == nil {
				title = d
			}
		}
		return nil
	})
	if err != nil {
		e.log.Warn("read transcript for the conversation file", "session", t.session, "err", err)
		return
	}
	e.mem.Transcribe(ctx, t.session, title, msgs)
}

// turnBody runs the turn and says how it ended; reason is the failure's.
func (e *Engine) turnBody(t *turn) (outcome, string) {
	ctx := t.ctx
	e.mu.Lock()
	cfg, key := e.cfg, e.key
	e.mu.Unlock()
	if cfg == nil || key == "" {
		return outcomeNothing, ""
	}
	l := limits{cfg: *cfg, key: key}
	proceed := t.opened
	if !t.opened {
		if err := e.st.Write(ctx, "turn-open", func(tx *store.Tx) error {
			var err error
			proceed, err = e.openTurn(ctx, tx, t)
			if err != nil || !proceed {
				return err
			}
			// The run starts: THINKING commits with the turn's opening.
			return e.transition(ctx, tx)
		}); err != nil {
			if e.st != nil && ctx.Err() != nil {
				return outcomeAbandoned, ""
			}
			e.log.Error("open turn", "session", t.session, "err", err)
			return outcomeNothing, ""
		}
	}
	if !proceed {
		return outcomeNothing, ""
	}
	modelLimits := t.limits
	if modelLimits == nil || t.limitsKey != key || t.limitsModel != cfg.Model.ID {
		modelLimits = e.readModelLimits(t, key, cfg.Model.ID)
	}
	if err := e.st.Read(ctx, func(q store.Querier) error {
		var err error
		t.taint, err = loadTaint(ctx, q, t.session)
		return err
	}); err != nil {
		if ctx.Err() != nil {
			return outcomeAbandoned, ""
		}
		return outcomeFailed, err.Error()
	}
	if e.mcp != nil {
		// The turn offers the tools of the servers that could start: it waits
		// for those being started (ref 8.3), each at most its startup timeout.
		e.mcp.Ready(ctx)
	}
	l.offered = e.offeredTools(*cfg)
	ml, err := modelLimits()
	if err != nil {
		if out, ok := e.interrupted(t); ok {
			return out, ""
		}
		if errors.Is(err, openrouter.ErrUnknownModel) {
			return outcomeFailed, fmt.Sprintf("OpenRouter does not know the model %s", cfg.Model.ID)
		}
		return outcomeFailed, fmt.Sprintf("the model's limits could not be read: %v", err)
	}
	l.model = ml
	steps, cuts, empties, windowRetries := 0, 0, 0, 0
	for {
		if out, ok := e.interrupted(t); ok {
			return out, ""
		}
		// The inputs waiting are injected before every request of the chat,
		// but the first of a turn that opened by injecting them.
		if t.taskID == "" && (steps > 0 || t.kind != "input") {
			if err := e.st.Write(ctx, "inject", func(tx *store.Tx) error {
				if _, err := e.injectInputs(ctx, tx); err != nil {
					return err
				}
				if t.taint.by != nil {
					return nil
				}
				// An input injected now (another Dot's answer) may taint
				// the turn.
				var err error
				t.taint, err = loadTaint(ctx, txq{tx}, t.session)
				return err
			}); err != nil {
				return outcomeFailed, fmt.Sprintf("an input could not be recorded: %v", err)
			}
		}
		if reason, over, err := e.checkLimits(ctx, t, l, steps); err != nil {
			return outcomeFailed, fmt.Sprintf("the limits could not be read: %v", err)
		} else if over != nil {
			if err := e.parkBudget(ctx, t, over.spent, over.cap, l.cfg.Limits.MaxCostPerTaskUSD); err != nil {
				return e.failOrInterrupt(t, err)
			}
			return outcomeParked, ""
		} else if reason != "" {
			return outcomeFailed, reason
		}
		// Read again for every request: a browser launched in this turn
		// brings the page tools its server serves, which the next request
		// offers.
		l.offered = e.offeredTools(l.cfg)
		req, err := e.buildRequest(ctx, t, l)
		if err != nil {
			if out, ok := e.interrupted(t); ok {
				return out, ""
			}
			return outcomeFailed, err.Error()
		}
		req.OnWait = e.sayWait(t)
		resp, err := e.model.Complete(t.req, key, req)
		if err != nil {
			if out, ok := e.interrupted(t); ok {
				return out, ""
			}
			if window, ok := contextLengthRefusal(err); ok {
				// The provider counted more than the window holds: compact
				// and ask again, once (ref 8.6's summary).
				if windowRetries == 0 {
					windowRetries++
					t.counted, t.compact = nil, true
					continue
				}
				return outcomeFailed, fmt.Sprintf("the conversation does not fit the model's context window of %d tokens even after it was compacted: %v", window, err)
			}
			return outcomeFailed, fmt.Sprintf("the model request failed: %v", err)
		}
		t.counted = &countedRequest{msgs: req.Messages, tools: req.Tools, promptTokens: resp.Usage.PromptTokens}
		steps++
		var out outcome = -1
		var reason string
		var calls []Call
		var assistantID int64
		// The chat's answer empties the chat's ledger in its transaction:
		// its own cost is added to what the ledger holds (own), not written
		// to the ledger to be deleted again, two rows' pages in the commit
		// of every answer.
		answers := t.taskID == "" && resp.Usage.CostUSD != nil && !resp.Cut() && len(resp.ToolCalls) == 0 &&
			strings.TrimSpace(resp.Content) != ""
		var own spend
		if answers {
			own.USD = *resp.Usage.CostUSD
			if resp.Usage.ReasoningTokens > 0 {
				own.ReasoningTokens = int64(resp.Usage.ReasoningTokens)
			}
		}
		err = e.st.Write(ctx, "assistant", func(tx *store.Tx) error {
			out, reason, calls, assistantID = -1, "", nil, 0
			if !answers {
				if err := addSpend(ctx, tx, t.session, resp.Usage.CostUSD, resp.Usage.ReasoningTokens); err != nil {
					return err
				}
			}
			if t.taskID != "" {
				if _, err := tx.Exec(ctx, "UPDATE dots_tasks SET steps = steps + 1 WHERE task_id = ?", t.taskID); err != nil {
					return fmt.Errorf("count step: %w", err)
				}
			}
			if resp.Usage.CostUSD == nil {
				// Nothing is done on an unpriced response (ref 8.2).
				out, reason = outcomeFailed, "stopped: OpenRouter reported no cost for a request, so limits.max_cost_per_task_usd cannot be enforced"
				return nil
			}
			if resp.Cut() {
				cuts++
				if strings.TrimSpace(resp.Content) != "" {
					if _, err := appendMessage(ctx, tx, t.session, Message{Role: "assistant", Content: resp.Content}); err != nil {
						return err
					}
				}
				if cuts > e.cuts {
					out, reason = outcomeFailed, fmt.Sprintf("stopped: the model's answers were cut at its output limit %d times", cuts)
					return nil
				}
				note := "[Your previous answer was cut at the output limit; none of its tool calls ran. Go on from where it stopped, in smaller steps.]"
				if strings.TrimSpace(resp.Content) == "" {
					note = "[Your previous answer was cut at the output limit before any text: nothing ran. Do the work in smaller steps.]"
				}
				_, err := appendMessage(ctx, tx, t.session, Message{Role: "user", Content: note})
				return err
			}
			if len(resp.ToolCalls) == 0 && strings.TrimSpace(resp.Content) == "" {
				// No answer and no call: asked once more, then the work
				// fails (ref 8.2: a run that ends without an answer fails).
				// Nothing of the empty answer is stored.
				empties++
				if empties > 1 {
					out, reason = outcomeFailed, "the model gave no answer"
					return nil
				}
				_, err := appendMessage(ctx, tx, t.session, Message{Role: "user", Content: emptyAnswerNote})
				return err
			}
			if len(resp.ToolCalls) == 0 {
				id, err := appendMessage(ctx, tx, t.session, Message{Role: "assistant", Content: resp.Content,
					Reasoning: resp.Reasoning, ReasoningDetails: resp.ReasoningDetails})
				if err != nil {
					return err
				}
				out = outcomeAnswered
				if err := e.finalAnswer(ctx, tx, t, id, resp.Content, own); err != nil {
					return err
				}
				// The turn ends with its answer, in its transaction.
				if err := endApprovals(ctx, tx, t.session); err != nil {
					return err
				}
				return e.endTurn(ctx, tx, t)
			}
			for _, c := range resp.ToolCalls {
				calls = append(calls, Call{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
			id, err := appendMessage(ctx, tx, t.session, Message{Role: "assistant", Content: resp.Content, ToolCalls: calls,
				Reasoning: resp.Reasoning, ReasoningDetails: resp.ReasoningDetails})
			if err != nil {
				return err
			}
			assistantID = id
			if text := strings.TrimSpace(resp.Content); t.taskID != "" && text != "" {
				sp, err := readSpend(ctx, txq{tx}, t.session)
				if err != nil {
					return err
				}
				usd := protocol.RoundUSD(sp.USD)
				if _, err := tx.Emit(ctx, protocol.EventTaskProgress, protocol.TaskProgress{
					TaskID: t.taskID, Text: cutText(text, protocol.TaskProgressMax), SpentUSD: &usd, ReasoningTokens: sp.reasoning()}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			e.reopen(t) // its endTurn, if it ran, did not commit
			if out, ok := e.interrupted(t); ok {
				return out, ""
			}
			return outcomeFailed, fmt.Sprintf("the answer could not be recorded: %v", err)
		}
		if out >= 0 {
			return out, reason
		}
		if len(calls) == 0 {
			continue // a cut or empty answer: ask again
		}
		if out, reason := e.runCalls(t, l, assistantID, calls); out >= 0 {
			return out, reason
		}
	}
}

// readModelLimits starts reading the model's limits (ref 8.5: at the start
// of every turn) and returns the function that waits for them. The read is
// a request to OpenRouter; it runs while the turn's opening goes on (the
// commit of a chat turn Accept opened, its taint read, the MCP servers it
// waits for, its THINKING committed), which it waited for before. A turn
// that ends before it asks for them leaves the read to end with the turn's
// requests (t.req).
func (e *Engine) readModelLimits(t *turn, key, model string) func() (openrouter.Limits, error) {
	type result struct {
		limits openrouter.Limits
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		ml, err := e.model.ModelLimits(t.req, key, model)
		ch <- result{ml, err}
	}()
	return func() (openrouter.Limits, error) {
		r := <-ch
		return r.limits, r.err
	}
}

// readPrompt starts reading what the system prompt shows of the Dot's files
// (PromptReader) and returns the function that waits for it; nil when the
// Memory reads them only as it builds the prompt. Like readModelLimits it
// runs while the turn's opening commits, and a turn that ends first leaves
// it to end with the turn's requests (t.req).
func (e *Engine) readPrompt(t *turn) func() PromptBuilder {
	r, ok := e.mem.(PromptReader)
	if !ok {
		return nil
	}
	ch := make(chan PromptBuilder, 1)
	go func() { ch <- r.ReadPrompt(t.req) }()
	return func() PromptBuilder { return <-ch }
}

// emptyAnswerNote asks again after an answer with neither text nor a call.
const emptyAnswerNote = "[Your previous answer was empty: it said nothing and called no tool. Answer now, or call the tool the work needs.]"

// sayWait is the turn's Request.OnWait: a wait shorter than the server asked
// (a Retry-After past the client's bound) is said in task.progress, so the
// person knows why the task is not moving and that it goes on.
func (e *Engine) sayWait(t *turn) func(openrouter.Wait) {
	return func(w openrouter.Wait) {
		if !w.Capped() || t.taskID == "" {
			return
		}
		text := fmt.Sprintf("OpenRouter asked to wait %s before trying again; waiting %s, the longest wait, then trying again (attempt %d of %d).",
			w.Asked.Round(time.Second), w.Delay.Round(time.Second), w.Attempt+1, openrouter.MaxAttempts)
		err := e.st.Write(t.ctx, "wait", func(tx *store.Tx) error {
			sp, err := readSpend(t.ctx, txq{tx}, t.session)
			if err != nil {
				return err
			}
			usd := protocol.RoundUSD(sp.USD)
			_, err = tx.Emit(t.ctx, protocol.EventTaskProgress, protocol.TaskProgress{TaskID: t.taskID, Text: text, SpentUSD: &usd,
				ReasoningTokens: sp.reasoning()})
			return err
		})
		if err != nil {
			e.log.Warn("tell of a wait", "task", t.taskID, "err", err)
		}
	}
}

// interrupted reports how a turn ends that a stop or a cancel cut.
func (e *Engine) interrupted(t *turn) (outcome, bool) {
	if errors.Is(context.Cause(t.ctx), errTaskCancelled) {
		return outcomeCancelled, true
	}
	if t.isStopped() || context.Cause(t.ctx) != nil {
		return outcomeAbandoned, true
	}
	return 0, false
}

// cutText trims text to max code points, the last an ellipsis.
func cutText(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// openTurn is the opening commit of a turn: the calls the previous unit left
// open are closed, then the opening messages appended. It reports whether
// the turn has anything to do.
func (e *Engine) openTurn(ctx context.Context, tx *store.Tx, t *turn) (bool, error) {
	if err := e.closeOpenCalls(ctx, tx, t.session); err != nil {
		return false, err
	}
	if t.taskID != "" {
		var status, desc string
		var starts, interrupted int
		err := tx.QueryRow(ctx, "SELECT status, description, starts, interrupted FROM dots_tasks WHERE task_id = ?", t.taskID).
			Scan(&status, &desc, &starts, &interrupted)
		if err != nil {
			return false, fmt.Errorf("read task %s: %w", t.taskID, err)
		}
		switch status {
		case "queued", "running", "waiting":
		default:
			return false, nil
		}
		if t.kind == "tell" {
			if _, err := tx.Exec(ctx, "UPDATE dots_tasks SET status = 'running' WHERE task_id = ?", t.taskID); err != nil {
				return false, err
			}
			return e.tellApprovals(ctx, tx, t.session)
		}
		if status != "queued" && starts >= 3 {
			return false, e.failTask(ctx, tx, t.taskID, fmt.Sprintf("stopped: the task was interrupted %d times", starts))
		}
		if _, err := tx.Exec(ctx, "UPDATE dots_tasks SET status = 'running', starts = starts + 1, interrupted = 0 WHERE task_id = ?", t.taskID); err != nil {
			return false, fmt.Errorf("start task %s: %w", t.taskID, err)
		}
		if _, err := tx.Emit(ctx, protocol.EventTaskStarted, protocol.TaskStarted{TaskID: t.taskID}); err != nil {
			return false, err
		}
		var n int
		if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM messages WHERE session = ?", t.session).Scan(&n); err != nil {
			return false, err
		}
		if n == 0 {
			if _, err := appendMessage(ctx, tx, t.session, Message{Role: "user", Content: desc}); err != nil {
				return false, err
			}
		}
		if status == "running" || interrupted == 1 {
			note := "[The previous attempt at this task was interrupted by a restart. Check what was already done before going on; a call reported interrupted may have taken effect.]"
			if _, err := appendMessage(ctx, tx, t.session, Message{Role: "user", Content: note}); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	switch t.kind {
	case "tell":
		return e.tellApprovals(ctx, tx, t.session)
	case "input":
		injected, err := e.injectInputs(ctx, tx)
		if err != nil {
			return false, err
		}
		if injected > 0 {
			// What it injected is in the transcript, unanswered.
			return true, nil
		}
	}
	// A chat turn answers what the transcript holds unanswered.
	var n int
	if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM dots_inbound WHERE state = ?", inboundTranscript).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// injectInputs appends the accepted inputs waiting for the chat as user
// messages, in the order accepted, and marks them in the transcript; it
// reports how many it appended.
func (e *Engine) injectInputs(ctx context.Context, tx *store.Tx) (int, error) {
	rows, err := pendingInbound(ctx, txq{tx})
	if err != nil {
		return 0, err
	}
	injected := 0
	for _, r := range rows {
		var text string
		switch r.Type {
		case protocol.InboundUserMessage:
			var d protocol.UserMessage
			if err := json.Unmarshal(r.Data, &d); err != nil {
				return 0, fmt.Errorf("decode input %s: %w", r.ID, err)
			}
			text = d.Text
		case TypeAutomationFired:
			var d AutomationFired
			if err := json.Unmarshal(r.Data, &d); err != nil {
				return 0, fmt.Errorf("decode firing %s: %w", r.ID, err)
			}
			text = fmt.Sprintf("[Automation %q fired] %s", d.Job, d.Message)
		case protocol.InboundSystemEvent:
			var d protocol.SystemEvent
			var del protocol.Delegation
			if err := json.Unmarshal(r.Data, &d); err != nil || d.Name != protocol.SystemEventDelegation {
				continue
			}
			if err := json.Unmarshal(d.Data, &del); err != nil {
				return 0, fmt.Errorf("decode delegation %s: %w", r.ID, err)
			}
			text = delegationText(del)
			// Another Dot's words are untrusted input to the chat.
			if err := setTaint(ctx, tx, chatSession, protocol.Taint{Kind: protocol.TaintDelegation, Source: "Dot " + del.Dot}); err != nil {
				return 0, err
			}
		default:
			continue
		}
		if _, err := appendMessage(ctx, tx, chatSession, Message{Role: "user", Content: text, InboundID: r.ID}); err != nil {
			return 0, err
		}
		if _, err := tx.Exec(ctx, "UPDATE dots_inbound SET state = ? WHERE id = ?", inboundTranscript, r.ID); err != nil {
			return 0, fmt.Errorf("mark input %s in the transcript: %w", r.ID, err)
		}
		injected++
	}
	return injected, nil
}

// tellApprovals appends, for each decided approval of the session, the
// message that tells the model the decision (ref 8.8 Approvals).
func (e *Engine) tellApprovals(ctx context.Context, tx *store.Tx, session string) (bool, error) {
	rows, err := tx.Query(ctx, `SELECT id, tool, permission, status, COALESCE(note, '') FROM dots_approvals
		WHERE session = ? AND status IN ('approved','rejected','granted','told') ORDER BY created, rowid`, session)
	if err != nil {
		return false, fmt.Errorf("read decided approvals: %w", err)
	}
	type decided struct{ id, tool, permission, status, note string }
	var list []decided
	for rows.Next() {
		var d decided
		if err := rows.Scan(&d.id, &d.tool, &d.permission, &d.status, &d.note); err != nil {
			rows.Close()
			return false, err
		}
		list = append(list, d)
	}
	rows.Close()
	goOn := false
	for _, d := range list {
		next, approved := "told", false
		if d.status == "approved" || d.status == "granted" {
			next, approved = "granted", true
		}
		if d.permission == protocol.BudgetPermission {
			ok, err := e.tellBudget(ctx, tx, session, d.id, approved)
			if err != nil {
				return false, err
			}
			if !ok {
				return false, nil // the task failed
			}
			goOn = true
			continue
		}
		goOn = true
		// The transcript keeps the decision's public line only: the
		// arguments (a password typed, a token in a command) stay in
		// dots_approvals, and each request is given them (loadThread), so
		// no conversation file, summary or memory pass ever reads them.
		text := approvalLine(approved, d.tool, d.permission, d.note, d.id)
		if _, err := appendMessage(ctx, tx, session, Message{Role: "user", Content: text}); err != nil {
			return false, err
		}
		if _, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = ? WHERE id = ?", next, d.id); err != nil {
			return false, fmt.Errorf("mark approval %s %s: %w", d.id, next, err)
		}
	}
	return goOn, nil
}

// overBudget is a task at its cost cap: what it spent of what cap.
type overBudget struct{ spent, cap float64 }

// checkLimits applies the step limit and the cost cap before a model
// request (ref 8.2); it returns the failure's reason, or "", or for a task
// at its cost cap (the config's plus what the person allowed more) what
// the budget approval asks about.
func (e *Engine) checkLimits(ctx context.Context, t *turn, l limits, steps int) (string, *overBudget, error) {
	unit := "the turn"
	if t.taskID != "" {
		unit = "the task"
	}
	var sp spend
	var extra float64
	err := e.st.Read(ctx, func(q store.Querier) error {
		var err error
		sp, err = readSpend(ctx, q, t.session)
		if err != nil {
			return err
		}
		if t.taskID != "" {
			if extra, err = extraBudget(ctx, q, t.session); err != nil {
				return err
			}
			return q.QueryRowContext(ctx, "SELECT steps FROM dots_tasks WHERE task_id = ?", t.taskID).Scan(&steps)
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	if steps >= l.cfg.Limits.MaxStepsPerTask {
		return fmt.Sprintf("stopped: %s reached limits.max_steps_per_task (%d steps)", unit, l.cfg.Limits.MaxStepsPerTask), nil, nil
	}
	if sp.Unpriced {
		return "stopped: OpenRouter reported no cost for a request, so limits.max_cost_per_task_usd cannot be enforced", nil, nil
	}
	if limit := l.cfg.Limits.MaxCostPerTaskUSD + extra; sp.USD >= limit {
		if t.taskID != "" {
			return "", &overBudget{spent: sp.USD, cap: limit}, nil
		}
		return fmt.Sprintf("stopped: %s reached limits.max_cost_per_task_usd (spent %.4f USD of %.2f)", unit, sp.USD, limit), nil, nil
	}
	return "", nil, nil
}

// finalAnswer records what a final assistant message means (ref 8.8
// record_transcript_append): the chat's answer, or the task's completion.
// own is what the answer cost that the chat's ledger does not hold.
func (e *Engine) finalAnswer(ctx context.Context, tx *store.Tx, t *turn, msgID int64, text string, own spend) error {
	if t.taskID != "" {
		sp, err := readSpend(ctx, txq{tx}, t.session)
		if err != nil {
			return err
		}
		usd := protocol.RoundUSD(sp.USD)
		if _, err := tx.Exec(ctx, "UPDATE dots_tasks SET status = 'completed' WHERE task_id = ?", t.taskID); err != nil {
			return fmt.Errorf("complete task %s: %w", t.taskID, err)
		}
		_, err = tx.Emit(ctx, protocol.EventTaskCompleted, protocol.TaskCompleted{TaskID: t.taskID, Summary: text, SpentUSD: &usd,
			ReasoningTokens: sp.reasoning()})
		return err
	}
	return e.answerChat(ctx, tx, text, own)
}

// answeredQuery reads the newest person's message in the transcript, the
// one the chat's answer is in reply to. (+?: see store's stmt.)
const answeredQuery = "SELECT id FROM dots_inbound WHERE state = +? AND type = +? ORDER BY arrival DESC LIMIT 1"

// answerChat emits message.assistant, applies every input the transcript
// holds and takes the chat's spend with it: the ledger's and own, what the
// answer cost that the ledger does not hold (added as the ledger adds).
func (e *Engine) answerChat(ctx context.Context, tx *store.Tx, text string, own spend) error {
	sp, err := readSpend(ctx, txq{tx}, chatSession)
	if err != nil {
		return err
	}
	sp.USD += own.USD
	sp.ReasoningTokens += own.ReasoningTokens
	usd := protocol.RoundUSD(sp.USD)
	var replyTo sql.NullString
	err = tx.QueryRow(ctx, answeredQuery, inboundTranscript, protocol.InboundUserMessage).Scan(&replyTo)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("read the message answered: %w", err)
	}
	ev := protocol.MessageAssistant{Text: text, SpentUSD: &usd, ReasoningTokens: sp.reasoning()}
	if replyTo.Valid {
		ev.InReplyTo = &replyTo.String
	}
	if _, err := tx.Emit(ctx, protocol.EventMessageAssistant, ev); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "UPDATE dots_inbound SET state = ? WHERE state = ?", inboundAnswered, inboundTranscript); err != nil {
		return fmt.Errorf("apply answered inputs: %w", err)
	}
	// The chat's turn ends with its answer, and its taint with it.
	if err := clearTaint(ctx, tx, chatSession); err != nil {
		return err
	}
	return resetSpend(ctx, tx, chatSession, sp)
}

// endFailed is the transaction that ends a failed turn: its open calls
// closed, then the task failed, or the chat answered "I could not answer".
func (e *Engine) endFailed(ctx context.Context, tx *store.Tx, t *turn, reason string) error {
	if err := e.closeOpenCalls(ctx, tx, t.session); err != nil {
		return err
	}
	if err := endApprovals(ctx, tx, t.session); err != nil {
		return err
	}
	if t.taskID != "" {
		return e.failTask(ctx, tx, t.taskID, reason)
	}
	text := "I could not answer: " + reason
	if _, err := appendMessage(ctx, tx, chatSession, Message{Role: "assistant", Content: text}); err != nil {
		return err
	}
	return e.answerChat(ctx, tx, text, spend{})
}

// failTask fails a task with task.failed, unless it already ended.
func (e *Engine) failTask(ctx context.Context, tx *store.Tx, taskID, reason string) error {
	res, err := tx.Exec(ctx, "UPDATE dots_tasks SET status = 'failed' WHERE task_id = ? AND status IN ('queued','running','waiting')", taskID)
	if err != nil {
		return fmt.Errorf("fail task %s: %w", taskID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	sp, err := readSpend(ctx, txq{tx}, taskSession(taskID))
	if err != nil {
		return err
	}
	usd := protocol.RoundUSD(sp.USD)
	_, err = tx.Emit(ctx, protocol.EventTaskFailed, protocol.TaskFailed{TaskID: taskID, Error: reason, SpentUSD: &usd,
		ReasoningTokens: sp.reasoning()})
	return err
}

// isDelegation says whether an inbound event tells what became of a request
// the Dot made of another Dot (delegate_task) that the chat answers: an
// answer, a refusal, a cancellation; the note that the request was passed
// on is kept without a turn.
func isDelegation(parsed any) bool {
	d, ok := parsed.(*protocol.SystemEvent)
	if !ok || d.Name != protocol.SystemEventDelegation {
		return false
	}
	var del protocol.Delegation
	return json.Unmarshal(d.Data, &del) == nil && del.Outcome != protocol.DelegationAccepted
}

// delegationText is what the chat is told of a request made of another Dot.
func delegationText(d protocol.Delegation) string {
	return fmt.Sprintf("[Delegation: %s, %s] %s", d.Dot, strings.ToLower(d.Outcome), d.Text)
}
