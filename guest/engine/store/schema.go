package store

// schema is the engine's tables (ref 8.8). Every statement is idempotent, so
// applying it at every start is the migration.
const schema = `
CREATE TABLE IF NOT EXISTS dots_outbox (
	seq  INTEGER PRIMARY KEY AUTOINCREMENT,
	id   TEXT NOT NULL UNIQUE,
	type TEXT NOT NULL,
	ts   TEXT NOT NULL,
	data TEXT NOT NULL
);
-- Accepted inputs. state: pending (waits for a chat turn), transcript (in the
-- chat's transcript, not yet answered), answered, applied (an event whose
-- effect was made in the transaction that accepted it).
CREATE TABLE IF NOT EXISTS dots_inbound (
	id       TEXT PRIMARY KEY,
	type     TEXT NOT NULL,
	ts       TEXT NOT NULL,
	data     TEXT NOT NULL,
	arrival  INTEGER NOT NULL,
	state    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dots_inbound_state ON dots_inbound(state, arrival);
-- status: queued, running, waiting (an approval of its session is open),
-- completed, failed, cancelled. starts counts the runs that began and were
-- not given back (ref 8.7's three interruptions).
CREATE TABLE IF NOT EXISTS dots_tasks (
	task_id     TEXT PRIMARY KEY,
	description TEXT NOT NULL,
	priority    INTEGER NOT NULL,
	arrival     INTEGER NOT NULL,
	status      TEXT NOT NULL,
	starts      INTEGER NOT NULL DEFAULT 0,
	steps       INTEGER NOT NULL DEFAULT 0,
	interrupted INTEGER NOT NULL DEFAULT 0
);
-- A call that started: written with agent.state EXECUTING before the tool
-- runs, removed in the transaction that stores its result.
CREATE TABLE IF NOT EXISTS dots_tool_intents (
	session     TEXT NOT NULL,
	message_id  INTEGER NOT NULL,
	call_id     TEXT NOT NULL,
	tool        TEXT NOT NULL,
	permission  TEXT NOT NULL,
	decision    TEXT NOT NULL,
	target      TEXT,
	tty         INTEGER NOT NULL DEFAULT 0,
	started_ms  INTEGER NOT NULL,
	approval_id TEXT,
	PRIMARY KEY (session, message_id, call_id)
);
-- A gate decision that is not a run (park, deny, skip) commits in the same
-- transaction as the call's result message, so no decisions table is kept:
-- the transcript itself says what was decided.
-- status: pending, approved, rejected (decided, not yet told), granted,
-- told (a turn tells the session), running (the approved call runs), done.
CREATE TABLE IF NOT EXISTS dots_approvals (
	id         TEXT PRIMARY KEY,
	session    TEXT NOT NULL,
	task_id    TEXT,
	message_id INTEGER NOT NULL,
	call_id    TEXT NOT NULL,
	tool       TEXT NOT NULL,
	permission TEXT NOT NULL,
	arguments  TEXT NOT NULL,
	canonical  TEXT NOT NULL,
	reason     TEXT NOT NULL,
	status     TEXT NOT NULL,
	note       TEXT,
	created    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS dots_approvals_session ON dots_approvals(session, status);
CREATE TABLE IF NOT EXISTS dots_spend (
	session  TEXT PRIMARY KEY,
	usd      REAL NOT NULL DEFAULT 0,
	unpriced INTEGER NOT NULL DEFAULT 0
);
-- The reasoning tokens of a session's ledger (completion_tokens_details.
-- reasoning_tokens, part of the completion), beside dots_spend's money and
-- emptied with it: a table of its own so that a database made before it
-- needs no ALTER.
CREATE TABLE IF NOT EXISTS dots_spend_tokens (
	session   TEXT PRIMARY KEY,
	reasoning INTEGER NOT NULL DEFAULT 0
);
-- A session tainted by untrusted input (issue 24): its first source. The
-- chat's row goes when the chat answers; a task's stays with the task.
CREATE TABLE IF NOT EXISTS dots_taint (
	session TEXT PRIMARY KEY,
	kind    TEXT NOT NULL,
	source  TEXT NOT NULL
);
-- The permissions a person allowed for the rest of a tainted session's task
-- ("allow for the rest of this task").
CREATE TABLE IF NOT EXISTS dots_taint_allowed (
	session    TEXT NOT NULL,
	permission TEXT NOT NULL,
	PRIMARY KEY (session, permission)
);
-- What a person allowed a task to spend beyond limits.max_cost_per_task_usd
-- (budget approvals), by session.
CREATE TABLE IF NOT EXISTS dots_budget (
	session TEXT PRIMARY KEY,
	usd     REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dots_browser_identities (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL,
	proxy        TEXT,
	created_ms   INTEGER NOT NULL,
	last_used_ms INTEGER
);
-- Values masked as *** in every file the engine writes, gathered as they
-- appear and never forgotten (ref 8.6): a browser identity's proxy stays
-- here after the identity is deleted, since a conversation file is written
-- again whole and still carries what was said while it lived.
CREATE TABLE IF NOT EXISTS dots_masked (
	value TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS dots_kv (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
-- The Dot's automations. They live here rather than in a jobs.json so that a
-- firing's inbound row and the job's next run commit together.
CREATE TABLE IF NOT EXISTS dots_cron_jobs (
	name        TEXT PRIMARY KEY,
	every_s     INTEGER NOT NULL DEFAULT 0,
	cron_expr   TEXT NOT NULL DEFAULT '',
	tz          TEXT NOT NULL DEFAULT '',
	at_ms       INTEGER,
	message     TEXT NOT NULL,
	enabled     INTEGER NOT NULL DEFAULT 1,
	next_run_ms INTEGER,
	last_run_ms INTEGER,
	created_ms  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
	id           TEXT PRIMARY KEY,
	summary      TEXT,
	summary_upto INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS messages (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	session      TEXT NOT NULL,
	role         TEXT NOT NULL,
	content      TEXT NOT NULL,
	tool_calls   TEXT,
	tool_call_id TEXT,
	tool_name    TEXT,
	inbound_id   TEXT,
	ts_ms        INTEGER NOT NULL,
	cleared      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS messages_session ON messages(session, id);
-- The chat's conversation files are one a UTC day: after a turn the engine
-- reads the chat from the first day it has to write again, by time.
CREATE INDEX IF NOT EXISTS messages_session_ts ON messages(session, ts_ms);
-- The messages that carry tool calls, by session: a turn's opening looks
-- for the session's last one (its calls may be open), which without this
-- walked back over every message of a session that called no tool since,
-- the whole of a chat that never called one. Only those messages are in it.
CREATE INDEX IF NOT EXISTS messages_session_calls ON messages(session, id) WHERE tool_calls IS NOT NULL;
-- An assistant message's reasoning as the model gave it (the text and the
-- reasoning_details JSON), sent back with it on every later request of the
-- thread. A table of its own so that a database made before it needs no
-- ALTER: every statement here stays idempotent.
CREATE TABLE IF NOT EXISTS message_reasoning (
	message_id INTEGER PRIMARY KEY,
	reasoning  TEXT NOT NULL DEFAULT '',
	details    TEXT
);
`
