package work

import (
	"context"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// stateLocked is the agent's state now (ref 8.1): a tool running is
// EXECUTING, a turn running THINKING; with no turn, WAITING_APPROVAL while an
// approval waits, else IDLE.
func (e *Engine) stateLocked() protocol.AgentState {
	running := false
	for _, t := range []*turn{e.chat, e.task} {
		if t == nil {
			continue
		}
		running = true
		t.mu.Lock()
		executing := t.executing
		t.mu.Unlock()
		if executing {
			return protocol.StateExecuting
		}
	}
	if running {
		return protocol.StateThinking
	}
	if e.pending > 0 {
		return protocol.StateWaitingApproval
	}
	return protocol.StateIdle
}

// transition emits agent.state when the state changed, inside tx or in a
// transaction of its own when tx is nil. The state is computed inside the
// transaction: transactions are serialized by the store, so the order of the
// emitted states is the order they were computed in, and the last one
// emitted is the state now. The end of the last run is DONE, then IDLE or
// WAITING_APPROVAL. agent.state is at-least-once (ref 8.7).
func (e *Engine) transition(ctx context.Context, tx *store.Tx) error {
	emit := func(tx *store.Tx) error {
		e.mu.Lock()
		prev, next := e.state, e.stateLocked()
		if prev == next || !e.started {
			e.mu.Unlock()
			return nil
		}
		e.state = next
		e.mu.Unlock()
		states := []protocol.AgentState{next}
		if (prev == protocol.StateThinking || prev == protocol.StateExecuting) &&
			(next == protocol.StateIdle || next == protocol.StateWaitingApproval) {
			states = []protocol.AgentState{protocol.StateDone, next}
		}
		for _, s := range states {
			if _, err := tx.Emit(ctx, protocol.EventAgentState, protocol.AgentStateChanged{State: s}); err != nil {
				return err
			}
		}
		return nil
	}
	if tx != nil {
		return emit(tx)
	}
	return e.st.Write(ctx, "state", emit)
}

// refreshPending reads how many approvals wait for the person.
func (e *Engine) refreshPending(ctx context.Context) error {
	var n int
	err := e.st.Read(ctx, func(q store.Querier) error {
		var err error
		n, err = count(ctx, q, "SELECT COUNT(*) FROM dots_approvals WHERE status = 'pending'")
		return err
	})
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.pending = n
	e.mu.Unlock()
	return nil
}
