package work

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Texts the model reads as a call's result (ref 8.7, 8.8).
const (
	textDenied      = "The Dot's policy denied this call."
	textParked      = "This call needs the person's approval and has not run. It waits for their decision, which you will be told in a later turn; do not make it again before that."
	textSkipped     = "Skipped: an earlier call of this response waits for the person's approval, so this call did not run. Make it again after the decision if it is still needed."
	textInterrupted = "This call was interrupted before its result was recorded. It may have taken effect, and it may still be running. Check the current state before calling it again."
	textApprovalUse = " The approval it ran under was used; ask again if the call is still needed."
	textNotExecuted = "Not executed: the unit ended before this call ran."
)

// runCalls runs the calls of one response, one at a time in the model's
// order, each decided at the gate just before it runs (ref 8.4, 8.8). It
// returns -1 when the turn goes on.
func (e *Engine) runCalls(t *turn, l limits, msgID int64, calls []Call) (outcome, string) {
	ctx := t.ctx
	for i, c := range calls {
		if out, ok := e.interrupted(t); ok {
			return out, ""
		}
		tool, offered := findTool(l.offered, c.Name)
		if !offered {
			// Not offered: it never reaches the gate and never runs.
			if err := e.writeResult(ctx, t, "call-refused", c, fmt.Sprintf("There is no tool named %q among the tools offered to you. The call did not run.", c.Name), nil); err != nil {
				return e.failOrInterrupt(t, err)
			}
			continue
		}
		args, err := e.tools.Validate(c.Name, json.RawMessage(c.Arguments))
		if err != nil {
			if err := e.writeResult(ctx, t, "call-refused", c, fmt.Sprintf("The arguments of %s do not fit: %v. The call did not run.", c.Name, err), nil); err != nil {
				return e.failOrInterrupt(t, err)
			}
			continue
		}
		canon, err := canonicalJSON(args)
		if err != nil {
			return outcomeFailed, fmt.Sprintf("the arguments of %s could not be encoded: %v", c.Name, err)
		}
		// The gate: the map the host pushed, read at the moment of the call;
		// no config is a denial (fail closed).
		decision, reason := protocol.Deny, ""
		var taintAsk *protocol.Taint
		if cfg := e.Config(); cfg != nil {
			decision, reason, taintAsk = e.decide(cfg, t, tool.Permission)
		}
		var approvalID string
		switch decision {
		case protocol.Allow:
		case protocol.Ask:
			id, err := e.grantedApproval(ctx, t.session, c.Name, canon)
			if err != nil {
				return e.failOrInterrupt(t, err)
			}
			if id == "" {
				if err := e.park(ctx, t, tool, args, canon, msgID, calls, i, reason, taintAsk); err != nil {
					return e.failOrInterrupt(t, err)
				}
				return outcomeParked, ""
			}
			approvalID = id
		default:
			called := protocol.ToolCalled{TaskID: optional(t.taskID), Tool: c.Name, Permission: tool.Permission, Decision: protocol.Deny,
				TaintedBy: t.taint.by}
			if err := e.writeResult(ctx, t, "deny", c, textDenied, &called); err != nil {
				return e.failOrInterrupt(t, err)
			}
			continue
		}
		if out, reason := e.execute(t, tool, c, msgID, decision, approvalID, args); out >= 0 {
			return out, reason
		}
	}
	return -1, ""
}

func (e *Engine) failOrInterrupt(t *turn, err error) (outcome, string) {
	if out, ok := e.interrupted(t); ok {
		return out, ""
	}
	return outcomeFailed, fmt.Sprintf("a call could not be recorded: %v", err)
}

func findTool(tools []Tool, name string) (Tool, bool) {
	for _, t := range tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// canonicalJSON writes a value as JSON with sorted keys and no spaces, the
// form approvals are compared in (ref 8.8).
func canonicalJSON(v any) (string, error) {
	b, err := json.Marshal(v) // encoding/json sorts map keys
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// writeResult stores a call's result (and its tool.called, when given) in
// one transaction.
func (e *Engine) writeResult(ctx context.Context, t *turn, point string, c Call, text string, called *protocol.ToolCalled) error {
	return e.st.Write(ctx, point, func(tx *store.Tx) error {
		if _, err := appendMessage(ctx, tx, t.session, Message{Role: "tool", Content: text, ToolCallID: c.ID, ToolName: c.Name}); err != nil {
			return err
		}
		if called != nil {
			_, err := tx.Emit(ctx, protocol.EventToolCalled, *called)
			return err
		}
		return nil
	})
}

// grantedQuery reads the session's oldest approval of a tool with the same
// arguments that lets a call through. (+?: see store's stmt.)
const grantedQuery = `SELECT id FROM dots_approvals WHERE session = +? AND tool = +? AND canonical = +?
	AND status IN ('approved','granted') ORDER BY created, rowid LIMIT 1`

// grantedApproval finds the approval that lets this call through: the
// session's granted approval of the same tool with the same arguments.
func (e *Engine) grantedApproval(ctx context.Context, session, tool, canon string) (string, error) {
	var id string
	err := e.st.Read(ctx, func(q store.Querier) error {
		err := q.QueryRowContext(ctx, grantedQuery, session, tool, canon).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	return id, err
}

// park stores the call for approval with approval.requested, answers it and
// the later calls of the response, in one transaction (ref 8.8 Approvals).
func (e *Engine) park(ctx context.Context, t *turn, tool Tool, args map[string]any, canon string, msgID int64, calls []Call, i int,
	reason string, taintedBy *protocol.Taint) error {
	c := calls[i]
	err := e.st.Write(ctx, "park", func(tx *store.Tx) error {
		// A retried turn that asks the same call again reuses its pending
		// approval and asks nothing new.
		var id string
		err := tx.QueryRow(ctx, `SELECT id FROM dots_approvals WHERE session = ? AND call_id = ? AND tool = ? AND canonical = ?
			AND status = 'pending'`, t.session, c.ID, c.Name, canon).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			id = store.NewID()
			if reason == "" {
				reason = approvalReason(tool.Permission)
			}
			shown, err := json.Marshal(e.tools.ApprovalArguments(c.Name, args))
			if err != nil {
				return fmt.Errorf("encode approval arguments: %w", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO dots_approvals(id, session, task_id, message_id, call_id, tool, permission,
				arguments, canonical, reason, status, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)`,
				id, t.session, nullStr(t.taskID), msgID, c.ID, c.Name, tool.Permission, canon, canon, reason, tx.Now().UnixMilli()); err != nil {
				return fmt.Errorf("store approval: %w", err)
			}
			if _, err := tx.Emit(ctx, protocol.EventApprovalRequested, protocol.ApprovalRequested{
				ApprovalID: id, TaskID: optional(t.taskID), Tool: c.Name, Permission: tool.Permission,
				Arguments: shown, Reason: reason, TaintedBy: taintedBy}); err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("read pending approval: %w", err)
		}
		if _, err := appendMessage(ctx, tx, t.session, Message{Role: "tool", Content: textParked, ToolCallID: c.ID, ToolName: c.Name}); err != nil {
			return err
		}
		for _, later := range calls[i+1:] {
			if _, err := appendMessage(ctx, tx, t.session, Message{Role: "tool", Content: textSkipped, ToolCallID: later.ID, ToolName: later.Name}); err != nil {
				return err
			}
		}
		if t.taskID != "" {
			if err := parkTask(ctx, tx, t.taskID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return e.refreshPending(ctx)
}

func approvalReason(permission string) string {
	if info, ok := protocol.LookupPermission(permission); ok {
		return fmt.Sprintf("The Dot's configuration asks before it may %s (%s).", strings.ToLower(info.Label), permission)
	}
	return fmt.Sprintf("The Dot's configuration asks before it uses %s.", permission)
}

// execute records the call's intent, runs it and records its result, each
// a commit point (ref 8.8). It returns -1 when the turn goes on.
func (e *Engine) execute(t *turn, tool Tool, c Call, msgID int64, decision protocol.Decision, approvalID string, args map[string]any) (outcome, string) {
	ctx := t.ctx
	target := e.tools.Target(c.Name, args)
	if target != "" && protocol.CheckToolTarget(target) != nil {
		target = ""
	}
	tty := tool.StartsTerminal != nil && tool.StartsTerminal(args)
	started := e.now()
	t.setExecuting(true)
	err := e.st.Write(ctx, "intent", func(tx *store.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO dots_tool_intents(session, message_id, call_id, tool, permission, decision, target,
			tty, started_ms, approval_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, t.session, msgID, c.ID, c.Name, tool.Permission,
			string(decision), nullStr(target), tty, started.UnixMilli(), nullStr(approvalID)); err != nil {
			return fmt.Errorf("record intent of %s: %w", c.Name, err)
		}
		if approvalID != "" {
			if _, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = 'running' WHERE id = ?", approvalID); err != nil {
				return fmt.Errorf("mark approval %s running: %w", approvalID, err)
			}
		}
		return e.transition(ctx, tx)
	})
	if err != nil {
		t.setExecuting(false)
		return e.failOrInterrupt(t, err)
	}
	res := e.tools.Run(ctx, c.Name, json.RawMessage(c.Arguments))
	t.setExecuting(false)
	t.addImages(res.ImageURLs)
	if out, ok := e.interrupted(t); ok && ctx.Err() != nil {
		// Cut at the grace or by a cancel: the intent stays and the call is
		// reported interrupted by the next close of open calls.
		return out, ""
	}
	elapsed := e.now().Sub(started).Milliseconds()
	if elapsed < 0 {
		elapsed = 0
	}
	taintedBy := t.taint.by
	var newTaint *protocol.Taint
	if taintedBy == nil {
		if cfg := e.Config(); cfg != nil {
			if by, ok := taintOf(*cfg, tool, args, res.Text); ok {
				newTaint, taintedBy = &by, &by
			}
		}
	}
	err = e.st.Write(ctx, "result", func(tx *store.Tx) error {
		if newTaint != nil {
			if err := setTaint(ctx, tx, t.session, *newTaint); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "DELETE FROM dots_tool_intents WHERE session = ? AND message_id = ? AND call_id = ?",
			t.session, msgID, c.ID); err != nil {
			return fmt.Errorf("remove intent of %s: %w", c.Name, err)
		}
		if _, err := appendMessage(ctx, tx, t.session, Message{Role: "tool", Content: res.Text, ToolCallID: c.ID, ToolName: c.Name}); err != nil {
			return err
		}
		called := protocol.ToolCalled{TaskID: optional(t.taskID), Tool: c.Name, Permission: tool.Permission, Decision: decision,
			OK: res.OK && !res.Interrupted, DurationMS: elapsed, Target: optional(target), TaintedBy: taintedBy}
		if res.TTY {
			called.TTY = &res.TTY
		}
		if res.Interrupted {
			called.Interrupted = &res.Interrupted
		}
		if len(res.CalledArguments) > 0 {
			called.Arguments = res.CalledArguments
		}
		if _, err := tx.Emit(ctx, protocol.EventToolCalled, called); err != nil {
			return err
		}
		for _, ev := range res.Events {
			if _, err := tx.Emit(ctx, ev.Type, ev.Data); err != nil {
				return err
			}
		}
		if approvalID != "" {
			if _, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = 'done' WHERE id = ?", approvalID); err != nil {
				return fmt.Errorf("end approval %s: %w", approvalID, err)
			}
		}
		return e.transition(ctx, tx)
	})
	if err != nil {
		return e.failOrInterrupt(t, err)
	}
	if newTaint != nil {
		t.taint.by = newTaint
	}
	return -1, ""
}

// decide is the gate's decision for one call of permission under cfg, read
// at the moment of the call: the pushed map; an allow whose time ended
// (allow_until) is ask, logged once; an allow of a permission the config
// asks under untrusted input is ask while the session is tainted, unless
// the person allowed it for the task. reason and taint are the approval's
// when the decision is ask for either of those causes.
func (e *Engine) decide(cfg *protocol.RuntimeConfig, t *turn, permission string) (protocol.Decision, string, *protocol.Taint) {
	d := cfg.Decision(permission)
	if d != protocol.Allow {
		return d, "", nil
	}
	if end, ok := cfg.AllowEnds(permission); ok && !e.now().Before(end) {
		e.logExpired(permission, end)
		return protocol.Ask, expiredReason(permission, end), nil
	}
	if t.taint.asks(cfg, permission) {
		by := *t.taint.by
		return protocol.Ask, taintReason(permission, by), &by
	}
	return protocol.Allow, "", nil
}

// lastCallsQuery reads a session's newest assistant message with tool
// calls. It runs at every turn's opening, so it must find that message
// through the index of such messages (store's messages_session_calls), not
// by walking back over the session's messages. (+?: see store's stmt.)
const lastCallsQuery = `SELECT id, tool_calls FROM messages WHERE session = +? AND role = 'assistant' AND tool_calls IS NOT NULL
	ORDER BY id DESC LIMIT 1`

// closeOpenCalls answers every call of the session's newest assistant
// message that has no result, by what the database holds for it (ref 8.8):
// an intent is a call the engine stopped during (interrupted, reported
// once); nothing is a call that never started.
func (e *Engine) closeOpenCalls(ctx context.Context, tx *store.Tx, session string) error {
	var msgID int64
	var raw string
	err := tx.QueryRow(ctx, lastCallsQuery, session).Scan(&msgID, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read open calls of %s: %w", session, err)
	}
	var calls []Call
	if err := json.Unmarshal([]byte(raw), &calls); err != nil {
		return fmt.Errorf("decode calls of message %d: %w", msgID, err)
	}
	answered := map[string]bool{}
	rows, err := tx.Query(ctx, "SELECT tool_call_id FROM messages WHERE session = ? AND role = 'tool' AND id > ?", session, msgID)
	if err != nil {
		return fmt.Errorf("read results of %s: %w", session, err)
	}
	for rows.Next() {
		var id sql.NullString
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		answered[id.String] = true
	}
	rows.Close()
	taskID, _ := taskOf(session)
	for _, c := range calls {
		if answered[c.ID] {
			continue
		}
		var tool, permission, decision string
		var target, approval sql.NullString
		var tty bool
		err := tx.QueryRow(ctx, `SELECT tool, permission, decision, target, tty, approval_id FROM dots_tool_intents
			WHERE session = ? AND message_id = ? AND call_id = ?`, session, msgID, c.ID).Scan(&tool, &permission, &decision, &target, &tty, &approval)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := appendMessage(ctx, tx, session, Message{Role: "tool", Content: textNotExecuted, ToolCallID: c.ID, ToolName: c.Name}); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("read intent of %s: %w", c.ID, err)
		}
		text := textInterrupted
		if approval.Valid {
			text += textApprovalUse
			if _, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = 'done' WHERE id = ?", approval.String); err != nil {
				return fmt.Errorf("end approval %s: %w", approval.String, err)
			}
		}
		if _, err := appendMessage(ctx, tx, session, Message{Role: "tool", Content: text, ToolCallID: c.ID, ToolName: c.Name}); err != nil {
			return err
		}
		yes := true
		called := protocol.ToolCalled{TaskID: optional(taskID), Tool: tool, Permission: permission, Decision: protocol.Decision(decision),
			OK: false, DurationMS: 0, Interrupted: &yes}
		if target.Valid {
			called.Target = &target.String
		}
		if tty {
			called.TTY = &tty
		}
		if _, err := tx.Emit(ctx, protocol.EventToolCalled, called); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM dots_tool_intents WHERE session = ? AND message_id = ? AND call_id = ?", session, msgID, c.ID); err != nil {
			return fmt.Errorf("remove intent of %s: %w", c.ID, err)
		}
	}
	return nil
}

// parkTask marks a running task waiting for a person's answer (an approval
// of a tool call or of more budget), in the transaction that asks.
func parkTask(ctx context.Context, tx *store.Tx, taskID string) error {
	if _, err := tx.Exec(ctx, "UPDATE dots_tasks SET status = 'waiting' WHERE task_id = ? AND status = 'running'", taskID); err != nil {
		return fmt.Errorf("park task %s: %w", taskID, err)
	}
	return nil
}
