package work

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"sync"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Options configure an Engine.
type Options struct {
	Store  *store.Store
	Model  Model
	Tools  Toolbox
	Memory Memory // nil: a plain system prompt and no conversation files
	// MCP runs the declared MCP servers; nil runs none, and GET /tools then
	// reports each declared server failed, saying so.
	MCP MCPServers
	// Browsers are closed at every stop, after the turns ended; nil has none.
	Browsers Browsers
	Log      *slog.Logger
	Now      func() time.Time
	Grace    time.Duration // a tool's grace on a stop; default 20 s (ref 8.7)
	MaxCuts  int           // answers cut at max_tokens before a turn fails; default 3
}

// BrowserCloseOnStop bounds the close of the open browsers on SIGTERM (ref
// 8.7): after the tool's 20 s of grace it leaves about 6 s of systemd's
// TimeoutStopSec=30 to checkpoint the database. A browser not closed by then
// is killed with its server. Prepare-sleep has no such bound of its own: a
// browser's own 30 s close fits in the host's 60 s.
const BrowserCloseOnStop = 4 * time.Second

// ErrInvalid is an input the engine refuses (a malformed event, config or
// key); the API answers it 400.
var ErrInvalid = errors.New("invalid")

// Engine is the Dot's runtime.
type Engine struct {
	st    *store.Store
	model Model
	tools Toolbox
	mem   Memory
	mcp   MCPServers
	brs   Browsers
	log   *slog.Logger
	now   func() time.Time
	grace time.Duration
	cuts  int

	mu     sync.Mutex
	cfg    *protocol.RuntimeConfig
	cfgRaw string
	key    string
	// mcpSecrets are the MCP servers' secrets (server -> name -> value),
	// held in memory only, as the key.
	mcpSecrets map[string]map[string]string
	sleeping   bool // a prepare-sleep holds new work
	stopping   bool // the process is ending
	started    bool
	chat       *turn
	task       *turn
	state      protocol.AgentState // last emitted agent.state
	pending    int                 // approvals waiting for the person
	// expired are the allows whose time ended that were logged, by
	// permission (the end logged), so each end is logged once.
	expired map[string]time.Time

	// chatDays keeps what the chat's conversation files are written from,
	// chatThread the chat's messages after its summary.
	chatDays   chatDays
	chatThread chatThread

	kick chan struct{}
	wg   sync.WaitGroup
	loop context.CancelFunc

	// released, when set, is called by a turn's goroutine right after the
	// turn let go of its session (the next turn of the session may start
	// from then on). Tests only.
	released func()
}

const kvConfig = "runtime_config"

// New returns an engine over opts. Start recovers and starts the work.
func New(opts Options) *Engine {
	e := &Engine{
		st: opts.Store, model: opts.Model, tools: opts.Tools, mem: opts.Memory, mcp: opts.MCP, brs: opts.Browsers, log: opts.Log,
		now: opts.Now, grace: opts.Grace, cuts: opts.MaxCuts, kick: make(chan struct{}, 1),
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.grace == 0 {
		e.grace = protocol.PrepareSleepGraceSeconds * time.Second
	}
	if e.cuts == 0 {
		e.cuts = 3
	}
	return e
}

// Start is the entry of every process start (ref 8.8 "After a crash"):
// agent.started first, every open call closed once, tasks left running
// resumed or failed, then the work loop.
func (e *Engine) Start(ctx context.Context) error {
	if raw, ok, err := e.st.KV(ctx, kvConfig); err != nil {
		return err
	} else if ok {
		cfg, err := protocol.DecodeRuntimeConfig([]byte(raw))
		if err != nil {
			// A stored config that no longer validates is not applied; the
			// host pushes one again after agent.started.
			e.log.Warn("stored config does not validate; waiting for the host's", "err", err)
		} else {
			e.cfg, e.cfgRaw = &cfg, raw
		}
	}
	// The servers that need no secret start now; the others when the host
	// pushes their secrets after agent.started.
	e.applyMCP()
	var pending int
	err := e.st.Write(ctx, "recover", func(tx *store.Tx) error {
		if _, err := tx.Emit(ctx, protocol.EventAgentStarted, protocol.AgentStarted{}); err != nil {
			return err
		}
		sessions, err := sessionsWithCalls(ctx, tx)
		if err != nil {
			return err
		}
		for _, s := range sessions {
			if err := e.closeOpenCalls(ctx, tx, s); err != nil {
				return err
			}
		}
		// An approval still running was used by a call that was just
		// reported interrupted; closeOpenCalls ended it. Any other left
		// running (its call never got an intent) is over too.
		if _, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = 'done' WHERE status = 'running'"); err != nil {
			return fmt.Errorf("end running approvals: %w", err)
		}
		if err := e.recoverTasks(ctx, tx); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM dots_approvals WHERE status = 'pending'").Scan(&pending); err != nil {
			return fmt.Errorf("count pending approvals: %w", err)
		}
		// Every start records IDLE again (or that approvals wait).
		state := protocol.StateIdle
		if pending > 0 {
			state = protocol.StateWaitingApproval
		}
		_, err = tx.Emit(ctx, protocol.EventAgentState, protocol.AgentStateChanged{State: state})
		return err
	})
	if err != nil {
		return fmt.Errorf("recover engine state: %w", err)
	}
	e.mu.Lock()
	e.state = protocol.StateIdle
	if pending > 0 {
		e.state = protocol.StateWaitingApproval
	}
	e.pending = pending
	e.started = true
	e.mu.Unlock()
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.loop = cancel
	e.wg.Add(1)
	go e.run(loopCtx)
	e.Kick()
	return nil
}

func sessionsWithCalls(ctx context.Context, tx *store.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, "SELECT DISTINCT session FROM messages WHERE tool_calls IS NOT NULL ORDER BY session")
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// recoverTasks marks tasks left running as interrupted, or fails them on
// their third start (ref 8.7).
func (e *Engine) recoverTasks(ctx context.Context, tx *store.Tx) error {
	rows, err := tx.Query(ctx, "SELECT task_id, starts FROM dots_tasks WHERE status = 'running'")
	if err != nil {
		return fmt.Errorf("read running tasks: %w", err)
	}
	type left struct {
		id     string
		starts int
	}
	var tasks []left
	for rows.Next() {
		var l left
		if err := rows.Scan(&l.id, &l.starts); err != nil {
			rows.Close()
			return err
		}
		tasks = append(tasks, l)
	}
	rows.Close()
	for _, t := range tasks {
		if t.starts >= 3 {
			if err := e.failTask(ctx, tx, t.id, fmt.Sprintf("stopped: the task was interrupted %d times", t.starts)); err != nil {
				return err
			}
			continue
		}
		if _, err := tx.Exec(ctx, "UPDATE dots_tasks SET interrupted = 1 WHERE task_id = ?", t.id); err != nil {
			return fmt.Errorf("mark task %s interrupted: %w", t.id, err)
		}
	}
	return nil
}

// Kick asks the loop to look for work.
func (e *Engine) Kick() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

func (e *Engine) run(ctx context.Context) {
	defer e.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		}
		if err := e.schedule(ctx); err != nil && ctx.Err() == nil {
			e.log.Error("schedule work", "err", err)
		}
	}
}

// ready reports whether new work may start: config and key pushed, no
// prepare-sleep holding it, not stopping.
func (e *Engine) readyLocked() bool {
	return e.started && e.cfg != nil && e.key != "" && !e.sleeping && !e.stopping
}

// schedule starts the chat's next turn and the next task's turn when each is
// free (ref 8.8 Work).
func (e *Engine) schedule(ctx context.Context) error {
	e.mu.Lock()
	ready, chatFree, taskFree := e.readyLocked(), e.chat == nil, e.task == nil
	e.mu.Unlock()
	if !ready {
		return nil
	}
	if chatFree {
		if plan, err := e.nextChat(ctx); err != nil {
			return err
		} else if plan != nil {
			e.startTurn(ctx, plan)
		}
	}
	if taskFree {
		if plan, err := e.nextTask(ctx); err != nil {
			return err
		} else if plan != nil {
			e.startTurn(ctx, plan)
		}
	}
	return nil
}

// plan is a turn about to start.
type plan struct {
	session string
	taskID  string
	kind    string // "input", "owed", "tell", "task"
}

// chatWorkQuery counts, in one read, what nextChat decides from: the chat's
// decided approvals, the inputs waiting, the inputs in the transcript no
// answer covered, the chat's open approvals. (Four queries, every time the
// work is scheduled, twice a turn.)
const chatWorkQuery = `SELECT
	(SELECT COUNT(*) FROM dots_approvals WHERE session = ?1 AND status IN ('approved','rejected','granted','told')),
	(SELECT COUNT(*) FROM dots_inbound WHERE state = ?2),
	(SELECT COUNT(*) FROM dots_inbound WHERE state = ?3),
	(SELECT COUNT(*) FROM dots_approvals WHERE session = ?1 AND status = 'pending')`

func (e *Engine) nextChat(ctx context.Context) (*plan, error) {
	var decided, waiting, owed, open int
	err := e.st.Read(ctx, func(q store.Querier) error {
		if err := q.QueryRowContext(ctx, chatWorkQuery, chatSession, inboundPending, inboundTranscript).
			Scan(&decided, &waiting, &owed, &open); err != nil {
			return fmt.Errorf("read the chat's work: %w", err)
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case decided > 0:
		return &plan{session: chatSession, kind: "tell"}, nil
	case waiting > 0:
		return &plan{session: chatSession, kind: "input"}, nil
	case owed > 0 && open == 0:
		// The answer the chat owes (ref 8.7): a row in the transcript that
		// no answer covered, and no open approval holding the chat.
		return &plan{session: chatSession, kind: "owed"}, nil
	}
	return nil, nil
}

func (e *Engine) nextTask(ctx context.Context) (*plan, error) {
	var p *plan
	err := e.st.Read(ctx, func(q store.Querier) error {
		var tell bool
		var id string
		err := q.QueryRowContext(ctx, nextTaskQuery).Scan(&tell, &id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("read task queue: %w", err)
		case tell:
			p = &plan{session: taskSession(id), taskID: id, kind: "tell"}
		default:
			p = &plan{session: taskSession(id), taskID: id, kind: "task"}
		}
		return nil
	})
	return p, err
}

// nextTaskQuery finds, in one statement (it runs at every turn's end), the
// task to tell of a decided approval first (tell is true), else the task to
// run: a running task (resumed after a restart) goes on unless an approval
// of its session is open; then the queue by priority, then arrival.
const nextTaskQuery = `SELECT tell, task_id FROM (
	SELECT 1 AS tell, task_id FROM (SELECT t.task_id FROM dots_tasks t JOIN dots_approvals a ON a.session = 'task:' || t.task_id
		WHERE t.status IN ('waiting','running') AND a.status IN ('approved','rejected','granted','told')
		ORDER BY t.priority DESC, t.arrival LIMIT 1)
	UNION ALL
	SELECT 0, task_id FROM (SELECT task_id FROM dots_tasks t WHERE
		(status = 'running' AND NOT EXISTS (SELECT 1 FROM dots_approvals a WHERE a.session = 'task:' || t.task_id AND a.status = 'pending'))
		OR status = 'queued'
		ORDER BY CASE status WHEN 'running' THEN 0 ELSE 1 END, priority DESC, arrival LIMIT 1)
) ORDER BY tell DESC LIMIT 1`

func count(ctx context.Context, q store.Querier, query string, args ...any) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	return n, nil
}

// Accept records an inbound event and applies it in one transaction
// (ref 5.4). An id already held is ignored. A malformed event wraps
// ErrInvalid.
func (e *Engine) Accept(ctx context.Context, ev protocol.InboundEvent) error {
	parsed, err := protocol.ParseInbound(ev)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if ev.TS == "" {
		ev.TS = e.now().UTC().Format(time.RFC3339Nano)
	}
	var cancelTask string
	var approvalDecided bool
	var opened *turn
	err = e.st.Write(ctx, "inbound", func(tx *store.Tx) error {
		state := inboundApplied
		if ev.Type == protocol.InboundUserMessage || isDelegation(parsed) {
			// A message to answer in the chat: a person's, or what became
			// of a request made of another Dot.
			state = inboundPending
		}
		fresh, err := InsertInbound(ctx, tx, ev.ID, ev.Type, ev.TS, ev.Data, state)
		if err != nil || !fresh {
			return err
		}
		if state == inboundPending {
			opened, err = e.openOnAccept(ctx, tx)
			if err != nil {
				return err
			}
		}
		switch d := parsed.(type) {
		case *protocol.TaskCreated:
			var arrival int64
			if err := tx.QueryRow(ctx, "SELECT arrival FROM dots_inbound WHERE id = ?", ev.ID).Scan(&arrival); err != nil {
				return fmt.Errorf("read arrival: %w", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO dots_tasks(task_id, description, priority, arrival, status)
				VALUES (?, ?, ?, ?, 'queued') ON CONFLICT(task_id) DO NOTHING`, d.TaskID, d.Description, d.Priority, arrival); err != nil {
				return fmt.Errorf("queue task %s: %w", d.TaskID, err)
			}
			if by, ok := taskTaint(d.Description, d.RequestedBy); ok {
				if err := setTaint(ctx, tx, taskSession(d.TaskID), by); err != nil {
					return err
				}
			}
		case *protocol.ApprovalReceived:
			status := "approved"
			if d.Decision == protocol.ApprovalReject {
				status = "rejected"
			}
			res, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = ?, note = ? WHERE id = ? AND status = 'pending'",
				status, d.Note, d.ApprovalID)
			if err != nil {
				return fmt.Errorf("record decision of approval %s: %w", d.ApprovalID, err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				e.log.Info("decision for an unknown or decided approval ignored", "approval", d.ApprovalID)
			} else {
				approvalDecided = true
				if status == "approved" && d.Scope != nil && *d.Scope == protocol.ApprovalScopeTask {
					if err := allowForTask(ctx, tx, d.ApprovalID); err != nil {
						return err
					}
				}
			}
		case *protocol.SystemEvent:
			if d.Name == protocol.SystemEventTaskCancelled {
				var c protocol.TaskCancelled
				_ = json.Unmarshal(d.Data, &c)
				res, err := tx.Exec(ctx, `UPDATE dots_tasks SET status = 'cancelled'
					WHERE task_id = ? AND status IN ('queued','running','waiting')`, c.TaskID)
				if err != nil {
					return fmt.Errorf("cancel task %s: %w", c.TaskID, err)
				}
				if n, _ := res.RowsAffected(); n > 0 {
					cancelTask = c.TaskID
					if _, err := tx.Exec(ctx, "UPDATE dots_approvals SET status = 'done' WHERE session = ? AND status != 'done'",
						taskSession(c.TaskID)); err != nil {
						return fmt.Errorf("end approvals of task %s: %w", c.TaskID, err)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		if opened != nil {
			e.dropOpened(opened)
		}
		return err
	}
	if opened != nil {
		e.launch(opened)
	}
	e.mu.Lock()
	slept := e.sleeping
	e.sleeping = false // a new inbound event lifts a prepare-sleep (ref 5.3)
	if cancelTask != "" && e.task != nil && e.task.taskID == cancelTask {
		e.task.cancel(errTaskCancelled)
	}
	e.mu.Unlock()
	if approvalDecided || cancelTask != "" {
		if err := e.refreshPending(ctx); err != nil {
			return err
		}
		if err := e.transition(ctx, nil); err != nil {
			return err
		}
	}
	// A message that opened the chat's turn here gave the loop nothing to
	// start: the chat is that turn's, and no task became ready. Its kick
	// read the task queue (two queries) at every message, while the turn
	// read and wrote; the turn kicks when it lets go of the chat.
	if opened == nil || slept {
		e.Kick()
	}
	return nil
}

// openOnAccept opens the chat's turn in the transaction that accepts a
// message for it, when the chat is free (or its turn only writes its
// conversation file, after which the new one runs) and would start that
// turn next (nextChat: no decided approval of the chat to tell first): the
// message goes into the transcript and THINKING is emitted with it, so the
// turn's opening costs no commit of its own. The turn holds the chat from
// here; Accept starts it once the transaction committed, or lets go of it
// (dropOpened) if it did not. nil when the chat's turn is left to schedule.
func (e *Engine) openOnAccept(ctx context.Context, tx *store.Tx) (*turn, error) {
	e.mu.Lock()
	free := e.readyLocked() && (e.chat == nil || e.chat.writing)
	e.mu.Unlock()
	if !free {
		return nil, nil
	}
	var decided int
	if err := tx.QueryRow(ctx, chatDecidedQuery, chatSession).Scan(&decided); err != nil {
		return nil, fmt.Errorf("read the chat's decided approvals: %w", err)
	}
	if decided > 0 {
		return nil, nil
	}
	t := newTurn(context.Background(), &plan{session: chatSession, kind: "input"})
	e.mu.Lock()
	if !e.readyLocked() || e.chat != nil && !e.chat.writing {
		e.mu.Unlock()
		t.reqEnd()
		t.cancel(nil)
		return nil, nil
	}
	// A turn still writing its conversation file keeps the chat until it
	// is done: this one runs after it (launch).
	t.after = e.chat
	e.chat, t.opened, t.stateBeforeEnd = t, true, e.state
	t.limitsKey, t.limitsModel = e.key, e.cfg.Model.ID
	e.mu.Unlock()
	// The turn reads the model's limits first, and what its prompt shows of
	// the Dot's files: the reads start now and run while this transaction
	// commits. (A turn that does not start ends them, dropOpened.)
	t.limits = e.readModelLimits(t, t.limitsKey, t.limitsModel)
	t.prompt = e.readPrompt(t)
	proceed, err := e.openTurn(ctx, tx, t)
	if err == nil && proceed {
		err = e.transition(ctx, tx)
	}
	if err != nil || !proceed {
		e.dropOpened(t)
		return nil, err
	}
	return t, nil
}

// dropOpened lets go of a turn openOnAccept opened whose transaction did
// not commit: it never ran, and the state it emitted was not recorded
// (openOnAccept kept the state before it in t.stateBeforeEnd).
func (e *Engine) dropOpened(t *turn) {
	e.mu.Lock()
	if e.chat == t {
		e.chat = nil
		if t.after != nil && !t.after.gone {
			// The turn it was opened over holds the chat again until it
			// is done.
			e.chat = t.after
		}
	}
	if e.state == protocol.StateThinking {
		e.state = t.stateBeforeEnd
	}
	e.mu.Unlock()
	t.reqEnd()
	t.cancel(errStopping)
	close(t.done)
}

// chatDecidedQuery counts the chat's decided approvals, which a turn tells
// before anything else.
const chatDecidedQuery = "SELECT COUNT(*) FROM dots_approvals WHERE session = ? AND status IN ('approved','rejected','granted','told')"

var keyRe = regexp.MustCompile(protocol.OpenRouterKeyPattern)

// SetSecrets holds the OpenRouter key in memory (ref 4.3). The same key
// again changes nothing; a running turn keeps the key it began with. It also
// lifts a prepare-sleep.
func (e *Engine) SetSecrets(req protocol.SecretsRequest) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	e.mu.Lock()
	if req.OpenRouterAPIKey != "" {
		e.key = req.OpenRouterAPIKey
	}
	if req.MCPSecrets != nil {
		// Memory only, as the key (ref 4.3): the MCP servers are started
		// with them, and every value is masked where the key is.
		e.mcpSecrets = cloneSecrets(req.MCPSecrets)
	}
	e.sleeping = false
	e.mu.Unlock()
	if req.MCPSecrets != nil {
		e.applyMCP()
	}
	e.Kick()
	return nil
}

// applyMCP hands the config and the MCP secrets in force to the servers.
func (e *Engine) applyMCP() {
	if e.mcp == nil {
		return
	}
	e.mu.Lock()
	cfg, secrets := e.cfg, cloneSecrets(e.mcpSecrets)
	e.mu.Unlock()
	e.mcp.Apply(cfg, secrets)
}

// PutConfig validates, stores and applies a runtime config. The same config
// again changes nothing.
func (e *Engine) PutConfig(ctx context.Context, body []byte) error {
	cfg, err := protocol.DecodeRuntimeConfig(body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	canon, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	e.mu.Lock()
	same := e.cfgRaw == string(canon)
	e.mu.Unlock()
	if same {
		return nil
	}
	if err := e.st.Write(ctx, "config", func(tx *store.Tx) error {
		return tx.SetKV(ctx, kvConfig, string(canon))
	}); err != nil {
		return err
	}
	e.mu.Lock()
	e.cfg, e.cfgRaw = &cfg, string(canon)
	e.mu.Unlock()
	e.applyMCP()
	e.Kick()
	return nil
}

// Config returns the config in force, or nil before the first push.
func (e *Engine) Config() *protocol.RuntimeConfig {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

func (e *Engine) keyNow() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.key
}

// Started reports whether the engine recovered and serves work.
func (e *Engine) Started() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

// KeyConfigured reports whether the host pushed the key.
func (e *Engine) KeyConfigured() bool { return e.keyNow() != "" }

// Key returns the key for masking secrets in the conversation files; it
// never leaves the engine otherwise.
func (e *Engine) Key() string { return e.keyNow() }

// MCPSecrets returns the secrets of one MCP server (name -> value), for
// starting it; nil when the host pushed none.
func (e *Engine) MCPSecrets(server string) map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.mcpSecrets[server])
}

// SecretValues is every secret the host pushed (the key and each MCP
// secret), for masking whatever the engine writes where the model or a
// person reads it.
func (e *Engine) SecretValues() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	if e.key != "" {
		out = append(out, e.key)
	}
	for _, server := range e.mcpSecrets {
		for _, v := range server {
			if v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

func cloneSecrets(in map[string]map[string]string) map[string]map[string]string {
	out := make(map[string]map[string]string, len(in))
	for server, secrets := range in {
		out[server] = maps.Clone(secrets)
	}
	return out
}

// State is GET /state.
func (e *Engine) State(ctx context.Context) (protocol.State, error) {
	e.mu.Lock()
	out := protocol.State{State: e.state}
	if e.task != nil && !e.task.ended {
		id := e.task.taskID
		out.CurrentTaskID = &id
	}
	e.mu.Unlock()
	err := e.st.Read(ctx, func(q store.Querier) error {
		var id string
		err := q.QueryRowContext(ctx, "SELECT id FROM dots_approvals WHERE status = 'pending' ORDER BY created, rowid LIMIT 1").Scan(&id)
		if err == nil {
			out.PendingApproval = &id
			return nil
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return fmt.Errorf("read pending approval: %w", err)
	})
	return out, err
}

// ToolsInfo is GET /tools: the table in its order, then the tools of the
// connected MCP servers (the Toolbox lists them after the table's), with what
// the model is offered now (before the first config, nothing), and every
// declared server with its state.
func (e *Engine) ToolsInfo() protocol.Tools {
	cfg := e.Config()
	out := protocol.Tools{Tools: []protocol.ToolInfo{}, MCPServers: []protocol.MCPServerStatus{}}
	for _, t := range e.tools.Tools() {
		offered := cfg != nil && t.offered(*cfg)
		out.Tools = append(out.Tools, protocol.ToolInfo{Name: t.Name, Permission: t.Permission, Offered: offered, Description: t.Description})
	}
	if e.mcp != nil {
		out.MCPServers = append(out.MCPServers, e.mcp.Status()...)
	} else if cfg != nil {
		// An engine made without MCP servers (some tests) reports each
		// declared one failed, with why, so the host shows the truth.
		for _, name := range cfg.ServerNames() {
			msg := "this engine runs no MCP servers"
			out.MCPServers = append(out.MCPServers, protocol.MCPServerStatus{Name: name, State: protocol.MCPFailed, Error: &msg})
		}
	}
	return out
}

// Stop ends the work (prepare-sleep or SIGTERM, ref 8.7): no new work; a turn
// with no tool running is cancelled at once, one with a tool running gets
// the grace for the tool to commit its result and is cancelled at the
// deadline. The attempt of a cut task is given back. When sleep is true a
// later key push or inbound event lifts it; otherwise the engine is ending.
func (e *Engine) Stop(ctx context.Context, sleep bool) error {
	e.mu.Lock()
	if sleep {
		e.sleeping = true
	} else {
		e.stopping = true
	}
	turns := []*turn{}
	for _, t := range []*turn{e.chat, e.task} {
		if t != nil {
			turns = append(turns, t)
		}
	}
	e.mu.Unlock()
	for _, t := range turns {
		t.stop(e.grace)
	}
	for _, t := range turns {
		select {
		case <-t.done:
		case <-ctx.Done():
			return fmt.Errorf("wait for turns to end: %w", ctx.Err())
		}
	}
	if !sleep && e.loop != nil {
		e.loop()
		e.wg.Wait()
	}
	if e.brs != nil {
		// No turn runs now, so no call holds a browser: each is asked to
		// close, so its profile is flushed, and its server ended. On
		// SIGTERM that has BrowserCloseOnStop of its own.
		bctx, cancel := ctx, context.CancelFunc(func() {})
		if !sleep {
			bctx, cancel = context.WithTimeout(ctx, BrowserCloseOnStop)
		}
		e.brs.CloseAll(bctx)
		cancel()
	}
	return e.st.Checkpoint(ctx)
}
