package work

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
)

// Sessions: the chat is "chat", a task is "task:<id>".
const chatSession = "chat"

func taskSession(taskID string) string { return "task:" + taskID }

func taskOf(session string) (string, bool) { return strings.CutPrefix(session, "task:") }

// querier is a read inside or outside a transaction.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// txq adapts a store.Tx to querier.
type txq struct{ tx *store.Tx }

func (t txq) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.tx.Query(ctx, q, args...)
}
func (t txq) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.tx.QueryRow(ctx, q, args...)
}

func appendMessage(ctx context.Context, tx *store.Tx, session string, m Message) (int64, error) {
	var calls any
	if len(m.ToolCalls) > 0 {
		b, err := json.Marshal(m.ToolCalls)
		if err != nil {
			return 0, fmt.Errorf("encode tool calls: %w", err)
		}
		calls = string(b)
	}
	res, err := tx.Exec(ctx, `INSERT INTO messages(session, role, content, tool_calls, tool_call_id, tool_name, inbound_id, ts_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, session, m.Role, m.Content, calls, nullStr(m.ToolCallID), nullStr(m.ToolName),
		nullStr(m.InboundID), tx.Now().UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("append %s message to %s: %w", m.Role, session, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	if m.Reasoning != "" || len(m.ReasoningDetails) > 0 {
		if _, err := tx.Exec(ctx, "INSERT INTO message_reasoning(message_id, reasoning, details) VALUES (?, ?, ?)",
			id, m.Reasoning, nullStr(string(m.ReasoningDetails))); err != nil {
			return 0, fmt.Errorf("store the reasoning of message %d: %w", id, err)
		}
	}
	return id, nil
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// The queries of a session's messages, oldest first: those after a message
// (messagesAfterQuery), those stored from a time on (messagesFromQuery),
// and when the first message after one was stored (firstAfterQuery). They
// run at every turn. (+?: see store's stmt.) firstAfterQuery takes the
// minimum of +ts_ms, not of ts_ms: SQLite reads a MIN of an indexed column
// from that column's index (messages_session_ts) in its order, which walked
// the session's messages from its first until one came after, the whole
// chat at every turn, where messages_session finds the few after at once.
const (
	messageColumns = `SELECT m.id, m.role, m.content, m.tool_calls, m.tool_call_id, m.tool_name, m.inbound_id,
		m.ts_ms, m.cleared, COALESCE(r.reasoning, ''), r.details
		FROM messages m LEFT JOIN message_reasoning r ON r.message_id = m.id`
	messagesAfterQuery = messageColumns + ` WHERE m.session = +? AND m.id > ? ORDER BY m.id`
	messagesFromQuery  = messageColumns + ` WHERE m.session = +? AND m.ts_ms >= ? ORDER BY m.id`
	firstAfterQuery    = `SELECT MIN(+ts_ms) FROM messages WHERE session = +? AND id > ?`
)

// loadMessages returns the session's messages with id > after, oldest first.
func loadMessages(ctx context.Context, q querier, session string, after int64) ([]Message, error) {
	rows, err := q.QueryContext(ctx, messagesAfterQuery, session, after)
	if err != nil {
		return nil, fmt.Errorf("read transcript of %s: %w", session, err)
	}
	return scanMessages(session, rows)
}

// msgTail keeps the messages one read of a range gave, and while the range
// starts at the same place reads only the messages after the newest it
// kept: ids only grow and a read sees committed rows only, so every message
// it does not hold is after that one. The chat's thread (chatThread) and its
// days (chatDays) are two such ranges; both were read whole from SQLite at
// every turn before, a cost that grew with the chat.
type msgTail struct {
	mu    sync.Mutex
	valid bool
	start int64 // where the kept range starts (a message id, or a day)
	last  int64 // the newest message id read
	msgs  []Message
}

// load returns the range that starts at start. The kept messages are
// reused, with newer(last) after them, when they start there and were read
// up to at least seen; otherwise whole() reads the range anew, and last
// starts at seen when it holds nothing.
func (t *msgTail) load(start, seen int64, whole func() ([]Message, error), newer func(after int64) ([]Message, error)) ([]Message, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.valid && t.start == start && t.last >= seen {
		more, err := newer(t.last)
		if err != nil {
			return nil, err
		}
		t.msgs = append(t.msgs, more...)
	} else {
		msgs, err := whole()
		if err != nil {
			t.valid, t.msgs = false, nil
			return nil, err
		}
		t.valid, t.start, t.last, t.msgs = true, start, seen, msgs
	}
	if n := len(t.msgs); n > 0 {
		t.last = t.msgs[n-1].ID
	}
	return slices.Clip(t.msgs), nil
}

// forget drops what is kept (a kept message changed).
func (t *msgTail) forget() {
	t.mu.Lock()
	t.valid, t.msgs = false, nil
	t.mu.Unlock()
}

// chatDays is what the chat's conversation files are written from after a
// turn: its messages of every UTC day from the first day holding a message
// not written yet (each day whole, whatever order the clock gave the
// messages), kept between turns (msgTail) while that first day stays the
// same. What the files show of a message never changes once it is stored
// (only cleared does, of a tool result, which they do not show).
type chatDays struct{ tail msgTail }

// load returns the messages of the session's days from the first holding
// a message with id > after; none when nothing is new.
func (c *chatDays) load(ctx context.Context, q querier, session string, after int64) ([]Message, error) {
	var first sql.NullInt64
	if err := q.QueryRowContext(ctx, firstAfterQuery, session, after).Scan(&first); err != nil {
		return nil, fmt.Errorf("read transcript of %s: %w", session, err)
	}
	if !first.Valid {
		return nil, nil
	}
	y, m, d := time.UnixMilli(first.Int64).UTC().Date()
	from := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).UnixMilli()
	return c.tail.load(from, after,
		func() ([]Message, error) { return loadMessagesFrom(ctx, q, session, from) },
		func(last int64) ([]Message, error) { return loadMessages(ctx, q, session, last) })
}

// loadMessagesFrom returns the session's messages stored at or after from
// (Unix ms), oldest first.
func loadMessagesFrom(ctx context.Context, q querier, session string, from int64) ([]Message, error) {
	rows, err := q.QueryContext(ctx, messagesFromQuery, session, from)
	if err != nil {
		return nil, fmt.Errorf("read transcript of %s: %w", session, err)
	}
	return scanMessages(session, rows)
}

func scanMessages(session string, rows *sql.Rows) ([]Message, error) {
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var m Message
		var calls, callID, toolName, inbound, details sql.NullString
		var ts int64
		if err := rows.Scan(&m.ID, &m.Role, &m.Content, &calls, &callID, &toolName, &inbound, &ts, &m.Cleared,
			&m.Reasoning, &details); err != nil {
			return nil, fmt.Errorf("read message of %s: %w", session, err)
		}
		if calls.Valid {
			if err := json.Unmarshal([]byte(calls.String), &m.ToolCalls); err != nil {
				return nil, fmt.Errorf("decode tool calls of message %d: %w", m.ID, err)
			}
		}
		m.ToolCallID, m.ToolName, m.InboundID = callID.String, toolName.String, inbound.String
		if details.Valid && details.String != "" {
			m.ReasoningDetails = json.RawMessage(details.String)
		}
		m.At = time.UnixMilli(ts)
		out = append(out, m)
	}
	return out, rows.Err()
}

// sessionSummary returns the summary of a session and the last message id it
// covers.
func sessionSummary(ctx context.Context, q querier, session string) (string, int64, error) {
	var summary sql.NullString
	var upto int64
	err := q.QueryRowContext(ctx, "SELECT summary, summary_upto FROM sessions WHERE id = ?", session).Scan(&summary, &upto)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("read summary of %s: %w", session, err)
	}
	return summary.String, upto, nil
}

// spend is a session's ledger row (ref 8.2), with the reasoning tokens its
// responses reported.
type spend struct {
	USD             float64
	Unpriced        bool
	ReasoningTokens int64
	// heldUSD and heldTokens say which of the session's ledger rows
	// readSpend found (the money's, the tokens'): resetSpend deletes those.
	heldUSD, heldTokens bool
}

// reasoning is the reasoning_tokens an event carries beside spent_usd:
// absent while the session's model reported none.
func (s spend) reasoning() *int64 {
	if s.ReasoningTokens <= 0 {
		return nil
	}
	n := s.ReasoningTokens
	return &n
}

// spendQuery reads a session's ledger and its reasoning tokens in one
// statement (a turn reads them twice): a row that is not there reads as
// NULL, which is nothing spent.
const spendQuery = `SELECT (SELECT usd FROM dots_spend WHERE session = ?1), (SELECT unpriced FROM dots_spend WHERE session = ?1),
	(SELECT reasoning FROM dots_spend_tokens WHERE session = ?1)`

func readSpend(ctx context.Context, q querier, session string) (spend, error) {
	var usd sql.NullFloat64
	var unpriced, reasoning sql.NullInt64
	if err := q.QueryRowContext(ctx, spendQuery, session).Scan(&usd, &unpriced, &reasoning); err != nil {
		return spend{}, fmt.Errorf("read spend of %s: %w", session, err)
	}
	return spend{USD: usd.Float64, Unpriced: unpriced.Int64 != 0, ReasoningTokens: reasoning.Int64,
		heldUSD: usd.Valid, heldTokens: reasoning.Valid}, nil
}

// addSpend adds a response's cost and reasoning tokens to the session's
// ledger; a nil cost marks the ledger unpriced.
func addSpend(ctx context.Context, tx *store.Tx, session string, cost *float64, reasoningTokens int) error {
	usd, unpriced := 0.0, 0
	if cost != nil {
		usd = *cost
	} else {
		unpriced = 1
	}
	_, err := tx.Exec(ctx, `INSERT INTO dots_spend(session, usd, unpriced) VALUES (?, ?, ?)
		ON CONFLICT(session) DO UPDATE SET usd = usd + excluded.usd, unpriced = MAX(unpriced, excluded.unpriced)`,
		session, usd, unpriced)
	if err != nil {
		return fmt.Errorf("record spend of %s: %w", session, err)
	}
	if reasoningTokens > 0 {
		_, err := tx.Exec(ctx, `INSERT INTO dots_spend_tokens(session, reasoning) VALUES (?, ?)
			ON CONFLICT(session) DO UPDATE SET reasoning = reasoning + excluded.reasoning`, session, reasoningTokens)
		if err != nil {
			return fmt.Errorf("record reasoning tokens of %s: %w", session, err)
		}
	}
	return nil
}

// resetSpend empties the session's ledger, whose rows sp, read in tx,
// found: a row it did not find is not there to delete.
func resetSpend(ctx context.Context, tx *store.Tx, session string, sp spend) error {
	if sp.heldUSD {
		if _, err := tx.Exec(ctx, "DELETE FROM dots_spend WHERE session = ?", session); err != nil {
			return fmt.Errorf("reset spend of %s: %w", session, err)
		}
	}
	if sp.heldTokens {
		if _, err := tx.Exec(ctx, "DELETE FROM dots_spend_tokens WHERE session = ?", session); err != nil {
			return fmt.Errorf("reset reasoning tokens of %s: %w", session, err)
		}
	}
	return nil
}

// insertInboundQuery records an accepted input numbered one after the
// newest row's arrival. Rows are only ever added, here, each numbered after
// the highest, and SQLite gives a new row the highest rowid plus one, so the
// newest row (the highest rowid, found at once) holds the highest number.
// MAX(arrival) read every row's, at every input accepted: no index starts
// with arrival. The number is read in the insert itself, a statement less at
// every input than reading it first.
const insertInboundQuery = `INSERT INTO dots_inbound(id, type, ts, data, arrival, state)
	VALUES (?, ?, ?, ?, COALESCE((SELECT arrival FROM dots_inbound ORDER BY rowid DESC LIMIT 1), 0) + 1, ?)
	ON CONFLICT(id) DO NOTHING`

// InsertInbound records an accepted input under its id. It reports false,
// and does nothing, for an id the engine already holds (ref 5.4: the host may
// send an event again; an automation's firing is recorded once).
func InsertInbound(ctx context.Context, tx *store.Tx, id, typ, ts string, data json.RawMessage, state string) (bool, error) {
	res, err := tx.Exec(ctx, insertInboundQuery, id, typ, ts, string(data), state)
	if err != nil {
		return false, fmt.Errorf("record inbound %s: %w", typ, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Inbound row states.
const (
	inboundPending    = "pending"    // waits for a chat turn
	inboundTranscript = "transcript" // in the chat's transcript, not yet answered
	inboundAnswered   = "answered"
	inboundApplied    = "applied" // applied in the transaction that accepted it
)

// TypeAutomationFired is the inbound row of an automation's firing (ref 8.8).
const TypeAutomationFired = "automation.fired"

// AutomationFired is its data.
type AutomationFired struct {
	Job     string `json:"job"`
	Message string `json:"message"`
	AtMS    int64  `json:"at_ms"`
}

type inboundRow struct {
	ID, Type string
	Data     json.RawMessage
}

// pendingQuery reads the inputs waiting for the chat, in the order accepted:
// at every request of the chat. (+?: see store's stmt.)
const pendingQuery = "SELECT id, type, data FROM dots_inbound WHERE state = +? ORDER BY arrival"

func pendingInbound(ctx context.Context, q querier) ([]inboundRow, error) {
	rows, err := q.QueryContext(ctx, pendingQuery, inboundPending)
	if err != nil {
		return nil, fmt.Errorf("read waiting inputs: %w", err)
	}
	defer rows.Close()
	var out []inboundRow
	for rows.Next() {
		var r inboundRow
		var data string
		if err := rows.Scan(&r.ID, &r.Type, &data); err != nil {
			return nil, fmt.Errorf("read waiting input: %w", err)
		}
		r.Data = json.RawMessage(data)
		out = append(out, r)
	}
	return out, rows.Err()
}

// approvalLine is the public line of a decision as the transcript keeps it
// (ref 8.6): the tool, its permission and the decision, with the person's
// note, and the approval's id, by which each request is given the arguments
// (approvalForModel).
func approvalLine(approved bool, tool, permission, note, id string) string {
	verb := "rejected"
	if approved {
		verb = "approved"
	}
	line := fmt.Sprintf("[Approval] The person %s your call of %s (%s).", verb, tool, permission)
	if note != "" {
		line += " Their note: " + note
	}
	return line + " [approval " + id + "]"
}

var approvalLineRe = regexp.MustCompile(`(?s)^\[Approval\] The person (approved|rejected) your call of (\S+) \([^)]*\)\.( Their note: .*)? \[approval ([^\]]+)\]$`)

// approvalForModel is what the model is told of a decision whose public line
// is line: the same words with the arguments of the call, read from the
// approval; ok is false for any other message, or an approval no longer held.
func approvalForModel(ctx context.Context, q querier, line string) (string, bool, error) {
	m := approvalLineRe.FindStringSubmatch(line)
	if m == nil {
		return "", false, nil
	}
	var canonical string
	err := q.QueryRowContext(ctx, "SELECT canonical FROM dots_approvals WHERE id = ?", m[4]).Scan(&canonical)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read approval %s: %w", m[4], err)
	}
	var text string
	if m[1] == "approved" {
		text = fmt.Sprintf("[Approval] The person approved your call of %s. It has not run yet. Make the same call again now, with exactly these arguments: %s", m[2], canonical)
	} else {
		text = fmt.Sprintf("[Approval] The person rejected your call of %s with the arguments %s. It did not run.", m[2], canonical)
	}
	return text + m[3], true, nil
}
