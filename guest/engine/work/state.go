package work

import (
	"context"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// stateLocked is the agent's state now (ref 8.1): a tool running is
// EXECUTING, a turn running THINKING; with no turn (a turn whose end
// committed counts as none), WAITING_APPROVAL while an approval waits, else
// IDLE.
func (e *Engine) stateLocked() protocol.AgentState {
	running := false
	for _, t := range []*turn{e.chat, e.task} {
		if t == nil || t.ended {
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
	emit := func(tx *store.Tx) error { return e.emitState(ctx, tx, nil) }
	if tx != nil {
		return emit(tx)
	}
	return e.st.Write(ctx, "state", emit)
}

// endTurn is the transition of t's end, in tx, the transaction that ends
// the turn: t stops counting as running in the critical section that
// computes the state, so the DONE and IDLE (or WAITING_APPROVAL) of its end
// are computed before any later turn can start: a turn of t's session starts
// only once t let go of it (schedule), which it does after this committed.
// A transaction that does not commit must be followed by reopen.
func (e *Engine) endTurn(ctx context.Context, tx *store.Tx, t *turn) error {
	return e.emitState(ctx, tx, t)
}

// reopen undoes the endTurn of a transaction that did not commit: t counts
// as running again, and the state it emitted, which the outbox does not
// hold, is not the one the engine last said.
func (e *Engine) reopen(t *turn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t.ended {
		t.ended = false
		if e.state == t.endState {
			e.state = t.stateBeforeEnd
		}
	}
}

// finishTurn ends t's state when no transaction of its end did: in a
// transaction of its own when the state changes, else at once.
func (e *Engine) finishTurn(ctx context.Context, t *turn) error {
	e.mu.Lock()
	if t.ended {
		e.mu.Unlock()
		return nil
	}
	t.ended = true
	if e.stateLocked() == e.state || !e.started {
		e.mu.Unlock()
		return nil
	}
	t.ended = false
	e.mu.Unlock()
	err := e.st.Write(ctx, "state", func(tx *store.Tx) error { return e.endTurn(ctx, tx, t) })
	if err != nil {
		e.reopen(t)
		e.mu.Lock()
		t.ended = true // it ended all the same; its state was not recorded
		e.mu.Unlock()
	}
	return err
}

// emitState emits agent.state in tx when the state changed; ending, when
// set, is a turn whose end tx records.
func (e *Engine) emitState(ctx context.Context, tx *store.Tx, ending *turn) error {
	e.mu.Lock()
	prev := e.state
	if ending != nil {
		ending.ended, ending.stateBeforeEnd = true, prev
	}
	next := e.stateLocked()
	if ending != nil {
		ending.endState = next
	}
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
