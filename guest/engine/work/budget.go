package work

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Budgets that ask (issue 24): a task that reaches its cost cap
// (limits.max_cost_per_task_usd, plus what the person allowed more) parks
// with an approval of protocol.BudgetPermission instead of failing.
// Approved, the task's cap grows by the config's cap once more and the task
// goes on; rejected, it fails as it did before. The approval ends with the
// task as every approval does (the host expires it when the task ends).
// The chat keeps failing its turn at the cap: it has no task to grow.

// budgetTool is the approval's tool: not a tool of the table, the limit.
const budgetTool = "limits.max_cost_per_task_usd"

// extraBudget is what the person allowed a session beyond the config's cap.
func extraBudget(ctx context.Context, q store.Querier, session string) (float64, error) {
	var usd float64
	err := q.QueryRowContext(ctx, "SELECT usd FROM dots_budget WHERE session = ?", session).Scan(&usd)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the budget of %s: %w", session, err)
	}
	return usd, nil
}

// budgetArgs are a budget approval's arguments, as the card shows them.
type budgetArgs struct {
	SpentUSD float64 `json:"spent_usd"`
	CapUSD   float64 `json:"cap_usd"`
	MoreUSD  float64 `json:"more_usd"`
}

// parkBudget asks the person for more money for the task: an approval of
// the budget permission, the task waiting. A pending one is not asked again.
func (e *Engine) parkBudget(ctx context.Context, t *turn, spent, capUSD, more float64) error {
	err := e.st.Write(ctx, "park-budget", func(tx *store.Tx) error {
		var id string
		err := tx.QueryRow(ctx, "SELECT id FROM dots_approvals WHERE session = ? AND permission = ? AND status = 'pending'",
			t.session, protocol.BudgetPermission).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			id = store.NewID()
			args := budgetArgs{SpentUSD: protocol.RoundUSD(spent), CapUSD: protocol.RoundUSD(capUSD), MoreUSD: protocol.RoundUSD(more)}
			raw, err := json.Marshal(args)
			if err != nil {
				return err
			}
			reason := fmt.Sprintf("The task spent $%.4f of $%.2f (limits.max_cost_per_task_usd); allow $%.2f more?", spent, capUSD, more)
			if _, err := tx.Exec(ctx, `INSERT INTO dots_approvals(id, session, task_id, message_id, call_id, tool, permission,
				arguments, canonical, reason, status, created) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, 'pending', ?)`,
				id, t.session, nullStr(t.taskID), "budget-"+id, budgetTool, protocol.BudgetPermission, string(raw), string(raw), reason,
				tx.Now().UnixMilli()); err != nil {
				return fmt.Errorf("store budget approval: %w", err)
			}
			if _, err := tx.Emit(ctx, protocol.EventApprovalRequested, protocol.ApprovalRequested{
				ApprovalID: id, TaskID: optional(t.taskID), Tool: budgetTool, Permission: protocol.BudgetPermission,
				Arguments: raw, Reason: reason}); err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("read pending budget approval: %w", err)
		}
		return parkTask(ctx, tx, t.taskID)
	})
	if err != nil {
		return err
	}
	return e.refreshPending(ctx)
}

// tellBudget applies a decided budget approval when the task's turn opens:
// approved, the session's budget grows by the approval's more_usd and the
// model is told to go on; rejected, the task fails as at the cap. It
// reports whether the task goes on.
func (e *Engine) tellBudget(ctx context.Context, tx *store.Tx, session, id string, approved bool) (bool, error) {
	var raw string
	if err := tx.QueryRow(ctx, "SELECT arguments FROM dots_approvals WHERE id = ?", id).Scan(&raw); err != nil {
		return false, fmt.Errorf("read budget approval %s: %w", id, err)
	}
	var a budgetArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return false, fmt.Errorf("decode budget approval %s: %w", id, err)
	}
	if _, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = 'done' WHERE id = ?", id); err != nil {
		return false, fmt.Errorf("end budget approval %s: %w", id, err)
	}
	taskID, _ := taskOf(session)
	if !approved {
		return false, e.failTask(ctx, tx, taskID, fmt.Sprintf(
			"stopped: the task reached limits.max_cost_per_task_usd (spent %.4f USD of %.2f) and the person did not allow more", a.SpentUSD, a.CapUSD))
	}
	if _, err := tx.Exec(ctx, `INSERT INTO dots_budget(session, usd) VALUES (?, ?)
		ON CONFLICT(session) DO UPDATE SET usd = usd + excluded.usd`, session, a.MoreUSD); err != nil {
		return false, fmt.Errorf("grow the budget of %s: %w", session, err)
	}
	note := fmt.Sprintf("[Budget] The person allowed $%.2f more for this task (it had spent $%.4f of $%.2f). Go on with the task.",
		a.MoreUSD, a.SpentUSD, a.CapUSD)
	_, err := appendMessage(ctx, tx, session, Message{Role: "user", Content: note})
	return err == nil, err
}
