// Package store is the engine's one SQLite file (ref 8.8): the Dot's tables,
// the transcripts and the outbox. It is the one place a write transaction
// begins and ends (Store.Write), so every commit point is a single
// transaction that carries the outbox rows describing it, and a row is handed
// to the event streams only after its transaction committed.
//
// Commits are grouped: a commit under synchronous=FULL costs an fsync of the
// WAL (about 0.25 ms here, far more on a busy disk), which bounded the outbox
// at one commit point per fsync. Commit points that arrive while another is
// committing wait and then commit together, in one SQLite transaction, each
// inside a savepoint of its own (group commit). Each writer still gets its
// own answer, and only after the transaction holding its rows committed.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// FileName is the database's name inside the engine's state directory.
const FileName = "engine.sqlite"

// ErrOwned is returned by Open when another engine holds the file.
var ErrOwned = errors.New("another engine owns the database")

// Store is the open database. All access goes through one connection: the
// file is opened in SQLite's exclusive locking mode, which a second
// connection (of this process or another) could not share anyway.
type Store struct {
	db   *sql.DB
	path string
	now  func() time.Time

	mu      sync.Mutex // serializes transactions on the one connection
	lastSeq int64
	// recent are the newest committed outbox rows, in seq order: every
	// committed row with a seq after recentFloor (recentMu guards both).
	// The streams read them from here, not from SQLite (EventsAfter):
	// a stream read each commit's rows back from the table it had just
	// written them to, under the connection's lock that the turns wait on.
	recentMu    sync.RWMutex
	recent      []protocol.OutboundEvent
	recentBytes int
	recentFloor int64
	// stmts are the prepared statements by query text, nil for one that
	// did not prepare; wanted are queries seen but not prepared yet (a
	// statement is prepared outside a transaction: see stmt). Guarded by mu.
	stmts  map[string]*sql.Stmt
	wanted map[string]struct{}

	// The commit queue (Write): writers waiting for the next group commit,
	// oldest first, and whether one of them is committing now.
	qmu     sync.Mutex
	queue   []*write
	leading bool
	// groups counts the group commits tried, grouped the commit points
	// they held (GroupSize).
	groups, grouped atomic.Int64

	subMu sync.Mutex
	subs  map[chan struct{}]struct{}

	// AfterCommit, when set, is called with the name of every commit point
	// right after it committed (and BeforeCommit right before). The crash
	// tests use them to kill the process at each point; nothing else sets
	// them.
	AfterCommit  func(point string)
	BeforeCommit func(point string)
}

// Open opens (or creates) the database at path, takes the exclusive lock at
// once and applies the schema. A file another engine holds is ErrOwned.
func Open(ctx context.Context, path string) (*Store, error) {
	// locking_mode before journal_mode: in exclusive mode WAL needs no
	// shared-memory index, and the lock is held for the life of the
	// connection. busy_timeout 0 makes a held lock fail at once.
	dsn := "file:" + path + "?_pragma=locking_mode(EXCLUSIVE)&_pragma=busy_timeout(0)" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(ON)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open engine database %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &Store{db: db, path: path, now: time.Now, subs: map[chan struct{}]struct{}{},
		stmts: map[string]*sql.Stmt{}, wanted: map[string]struct{}{}}
	// Take the write lock now, so a second engine fails here and not at its
	// first write.
	if _, err := db.ExecContext(ctx, "BEGIN IMMEDIATE; COMMIT"); err != nil {
		db.Close()
		if isBusy(err) {
			return nil, fmt.Errorf("%w %s: stop the other engine first", ErrOwned, path)
		}
		return nil, fmt.Errorf("lock engine database %s: %w", path, err)
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("engine database %s is not in WAL mode (%q): %v", path, mode, err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("apply engine schema to %s: %w", path, err)
	}
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(seq), 0) FROM dots_outbox").Scan(&s.lastSeq); err != nil {
		db.Close()
		return nil, fmt.Errorf("read outbox of %s: %w", path, err)
	}
	s.recentFloor = s.lastSeq
	return s, nil
}

func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff
		return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
	}
	return strings.Contains(err.Error(), "database is locked")
}

// SetClock replaces the clock used for event timestamps (tests).
func (s *Store) SetClock(now func() time.Time) { s.now = now }

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.now() }

// Close checkpoints the WAL and closes the file, releasing the lock.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for q, st := range s.stmts {
		if st != nil {
			st.Close()
		}
		delete(s.stmts, q)
	}
	_, cerr := s.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close engine database: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("checkpoint engine database: %w", cerr)
	}
	return nil
}

// Checkpoint writes the WAL back into the database file (prepare-sleep).
func (s *Store) Checkpoint(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("checkpoint engine database: %w", err)
	}
	return nil
}

// Tx is one commit point's part of a write transaction (the whole of it,
// or one savepoint of a group commit). Emit adds outbox rows to it.
type Tx struct {
	tx      *sql.Tx
	s       *Store
	emitted int
	maxSeq  int64 // the highest seq it wrote
	// rows are the outbox rows it wrote, in seq order, for Store.recent.
	rows  []protocol.OutboundEvent
	after []func()
	// queried are the queries whose prepared statement Query ran in it: its
	// rows may still be open (see Query).
	queried map[string]bool
}

// uninterrupted is the context a statement of a transaction runs under. A
// context that ends while SQLite runs a write inside an explicit transaction
// interrupts it, and SQLite then rolls the whole transaction back: in a
// group commit every writer would lose its part to one writer's cancel. So a
// statement, once begun, runs to its end (they take microseconds); a context
// that already ended fails the statement before it begins (database/sql
// checks that first), which fails that writer's part only.
func uninterrupted(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// maxStmts bounds the prepared statements kept. The engine's queries are a
// few dozen constant texts; the bound only guards against a query built at
// run time.
const maxStmts = 256

// stmt returns the prepared statement of q, or nil when there is none yet.
// modernc's driver parses a query's SQL at every call otherwise, which was
// about a tenth of a turn's CPU. A statement is prepared on the database,
// which needs the one connection outside a transaction, so a query first
// seen inside one is noted and prepared at the next moment the connection
// is free (prepareWanted); it runs unprepared until then. The caller holds
// s.mu.
//
// A kept statement is only worth keeping if SQLite does not prepare it
// again at each run. It does (SQLite 3.54 as modernc builds it, with STAT4)
// for a query that compares a column with a parameter by = and orders its
// rows (ORDER BY, or MIN/MAX): its plan looked at that parameter's value,
// and the driver binds every parameter again at each run, which expires
// it. Such a query writes that parameter +? (the same value, of no affinity
// of its own, as ? is, whose value the plan does not look at): the queries
// of every turn do (their plans are checked by work's TestTurnQueryPlans).
func (s *Store) stmt(q string) *sql.Stmt {
	if st, ok := s.stmts[q]; ok {
		return st
	}
	if len(s.stmts)+len(s.wanted) < maxStmts {
		s.wanted[q] = struct{}{}
	}
	return nil
}

// prepareWanted prepares the queries noted by stmt. The caller holds s.mu
// and no transaction is open. A query that does not prepare is kept as nil
// and runs unprepared, its own run saying what is wrong with it.
func (s *Store) prepareWanted() {
	for q := range s.wanted {
		delete(s.wanted, q)
		st, err := s.db.Prepare(q)
		if err != nil {
			st = nil
		}
		s.stmts[q] = st
	}
}

// stmt is the prepared statement q runs from in the transaction, or nil
// when it runs unprepared: it has none yet, or Query ran it here and its
// rows may be open.
func (t *Tx) stmt(q string) *sql.Stmt {
	if t.queried[q] {
		return nil
	}
	return t.s.stmt(q)
}

// Exec runs a statement inside the transaction.
func (t *Tx) Exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	ctx = uninterrupted(ctx)
	if st := t.stmt(q); st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, q, args...)
}

// Query runs a query inside the transaction. Its rows may be open while the
// caller runs other statements, the same query again among them, which one
// prepared statement cannot serve (a run ends the rows of the one before).
// So only a commit point's first Query of a text runs from the prepared
// statement, and every later statement of that text in the commit point
// runs unprepared: its rows are closed when the commit point ends (the
// transaction could not commit over open rows).
func (t *Tx) Query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	ctx = uninterrupted(ctx)
	if st := t.stmt(q); st != nil {
		if t.queried == nil {
			t.queried = map[string]bool{}
		}
		t.queried[q] = true
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, q, args...)
}

// QueryRow runs a one-row query inside the transaction.
func (t *Tx) QueryRow(ctx context.Context, q string, args ...any) *sql.Row {
	ctx = uninterrupted(ctx)
	if st := t.stmt(q); st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, q, args...)
}

// Now is the store's clock.
func (t *Tx) Now() time.Time { return t.s.now() }

// OnCommit runs f after the transaction committed (never after a rollback).
func (t *Tx) OnCommit(f func()) { t.after = append(t.after, f) }

// MaxCursor is the highest cursor CatchUp moves the outbox to: a seq stays
// exact in a JSON number and far from overflowing.
const MaxCursor = 1 << 53

// CatchUp applies the cursor rule (ref 5.3): when the host asks for events
// after a cursor the outbox never reached (the guest lost its database), it
// writes guest.outbox.reset at seq cursor+1, so every later row comes after
// what the host already holds, and reports true. A cursor the outbox has
// reached changes nothing.
func (s *Store) CatchUp(ctx context.Context, cursor int64) (bool, error) {
	if cursor <= s.LastSeq() {
		return false, nil
	}
	if cursor >= MaxCursor {
		return false, fmt.Errorf("cursor %d is over %d", cursor, int64(MaxCursor))
	}
	moved := false
	err := s.Write(ctx, "outbox reset", func(tx *Tx) error {
		var last int64
		if err := tx.QueryRow(ctx, "SELECT COALESCE(MAX(seq), 0) FROM dots_outbox").Scan(&last); err != nil {
			return fmt.Errorf("read the outbox's end: %w", err)
		}
		if cursor <= last {
			return nil // another stream moved it meanwhile
		}
		raw, err := json.Marshal(protocol.OutboxReset{Cursor: cursor, LastSeq: last})
		if err != nil {
			return err
		}
		ts := s.now().UTC().Format("2006-01-02T15:04:05.000Z")
		id := newEventID(s.now())
		if _, err := tx.Exec(ctx, "INSERT INTO dots_outbox(seq, id, type, ts, data) VALUES (?, ?, ?, ?, ?)",
			cursor+1, id, protocol.EventOutboxReset, ts, string(raw)); err != nil {
			return fmt.Errorf("write %s to the outbox: %w", protocol.EventOutboxReset, err)
		}
		tx.emitted++
		tx.maxSeq = max(tx.maxSeq, cursor+1)
		tx.rows = append(tx.rows, protocol.OutboundEvent{Seq: cursor + 1, ID: id, Type: protocol.EventOutboxReset, TS: ts,
			Data: raw})
		moved = true
		return nil
	})
	return moved, err
}

// Emit writes one outbound event into the outbox in this transaction and
// returns its seq. The row reaches the streams only if the transaction
// commits.
func (t *Tx) Emit(ctx context.Context, typ string, data any) (int64, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return 0, fmt.Errorf("encode %s event: %w", typ, err)
	}
	now := t.s.now()
	id := newEventID(now)
	ts := now.UTC().Format("2006-01-02T15:04:05.000Z")
	res, err := t.Exec(ctx, "INSERT INTO dots_outbox(id, type, ts, data) VALUES (?, ?, ?, ?)", id, typ, ts, string(raw))
	if err != nil {
		return 0, fmt.Errorf("write %s event to the outbox: %w", typ, err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("read seq of %s event: %w", typ, err)
	}
	t.emitted++
	t.maxSeq = max(t.maxSeq, seq)
	t.rows = append(t.rows, protocol.OutboundEvent{Seq: seq, ID: id, Type: typ, TS: ts, Data: raw})
	return seq, nil
}

// Querier is what a read needs.
type Querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// Read runs fn with the connection, between transactions.
func (s *Store) Read(ctx context.Context, fn func(q Querier) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prepareWanted()
	return fn(reader{s})
}

// reader is the Querier of Read: the store's prepared statements, or the
// database. Outside a transaction a query holds the one connection until its
// rows close, so no query of a Read can run while another's rows are open:
// a prepared statement is never used twice at once.
//
// A read runs under uninterrupted(ctx), as a transaction's statements do: a
// query under a context that can end made database/sql and the driver each
// start a goroutine to watch it (two a query, a dozen queries a turn), to
// interrupt reads that take microseconds. A context that already ended
// still fails the read before it begins.
type reader struct{ s *Store }

func (r reader) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	ctx = uninterrupted(ctx)
	if st := r.s.stmt(q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return r.s.db.QueryContext(ctx, q, args...)
}

func (r reader) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	ctx = uninterrupted(ctx)
	if st := r.s.stmt(q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return r.s.db.QueryRowContext(ctx, q, args...)
}

// Write runs fn in one write transaction named point (a commit point of ref
// 8.8) and commits it; fn's error rolls everything fn did back, its events
// included. Write returns only once fn's rows committed (or failed to): the
// streams are woken after the commit, and AfterCommit and the OnCommit
// functions run in the caller's goroutine after it.
//
// Commit points that come while another group is committing are committed
// together (see the package comment), in the order they came, each in a
// savepoint: fn's error rolls back its own savepoint only. An error of the
// transaction itself (its commit, or SQLite abandoning it) fails every
// writer of the group, none of whose rows committed.
func (s *Store) Write(ctx context.Context, point string, fn func(tx *Tx) error) error {
	w := &write{ctx: ctx, point: point, fn: fn, turn: make(chan bool, 1)}
	s.qmu.Lock()
	s.queue = append(s.queue, w)
	lead := !s.leading
	s.leading = true
	s.qmu.Unlock()
	if !lead {
		lead = <-w.turn
	}
	if lead {
		s.commitQueue()
	}
	if w.err != nil {
		return w.err
	}
	if s.AfterCommit != nil {
		s.AfterCommit(point)
	}
	for _, f := range w.tx.after {
		f()
	}
	return nil
}

// write is one commit point in the queue.
type write struct {
	ctx   context.Context
	point string
	fn    func(tx *Tx) error
	tx    *Tx // its part, once it committed
	err   error
	// turn says true when the writer is to commit the queue itself (it is
	// at its head), false when its write is done.
	turn chan bool
}

// maxGroup bounds the commit points of one group commit, so that a burst
// does not make one transaction (and its first writer's wait) unbounded.
const maxGroup = 256

// commitQueue commits the writes at the queue's head, its caller's first,
// as one group; then hands the queue to the next writer waiting, if any,
// and answers the others of the group. Only one goroutine runs it at a time
// (the one whose write is at the head while leading is set).
func (s *Store) commitQueue() {
	s.mu.Lock()
	group, emitted := s.commitGroup(s.take(maxGroup))
	s.mu.Unlock()
	s.groups.Add(1)
	s.grouped.Add(int64(len(group)))
	if emitted {
		s.wake()
	}

	s.qmu.Lock()
	var next *write
	if len(s.queue) > 0 {
		next = s.queue[0]
	} else {
		s.leading = false
	}
	s.qmu.Unlock()
	if next != nil {
		next.turn <- true
	}
	for _, w := range group[1:] {
		w.turn <- false
	}
}

// take moves at most n writes from the queue's head into a group.
func (s *Store) take(n int) []*write {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	n = min(len(s.queue), n)
	group := append([]*write(nil), s.queue[:n]...)
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return group
}

// savepoint names each commit point's part of a group commit (one at a
// time, never nested).
const savepoint = "commit_point"

// commitGroup runs the group's functions in one transaction and commits it,
// setting each write's err or tx; it returns the group as it grew and
// whether outbox rows committed. A group of more than one takes in, before
// it commits, the writes that queued while its functions ran: the writers
// answered by the last commit queue again meanwhile, and without this each
// group would hold only about half of the writers. A group of one runs
// without a savepoint, as a plain transaction, and takes in nothing. The
// caller holds s.mu.
func (s *Store) commitGroup(group []*write) ([]*write, bool) {
	s.prepareWanted()
	// The transaction is the group's, not any one writer's: database/sql
	// rolls a transaction back when the context it began under ends.
	sqlTx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		for _, w := range group {
			w.err = fmt.Errorf("begin %s: %w", w.point, err)
		}
		return group, false
	}
	alone := len(group) == 1
	var done []*write
	for i := 0; ; i++ {
		if i == len(group) {
			if alone || len(group) >= maxGroup {
				break
			}
			more := s.take(maxGroup - len(group))
			if len(more) == 0 {
				break
			}
			group = append(group, more...)
		}
		w := group[i]
		if err := w.ctx.Err(); err != nil {
			w.err = fmt.Errorf("begin %s: %w", w.point, err)
			continue
		}
		if !alone {
			if _, err := s.execTx(sqlTx, "SAVEPOINT "+savepoint); err != nil {
				abandon(sqlTx, group[i:], done, fmt.Errorf("open the savepoint of %s: %w", w.point, err))
				return group, false
			}
		}
		tx := &Tx{tx: sqlTx, s: s}
		err := w.fn(tx)
		if err == nil && w.ctx.Err() != nil {
			// Its writer gave up while it ran: as a lone transaction would
			// be, its part is rolled back.
			err = fmt.Errorf("commit %s: %w", w.point, w.ctx.Err())
		}
		if err != nil {
			w.err = err
			if alone {
				if rerr := sqlTx.Rollback(); rerr != nil {
					w.err = errors.Join(err, fmt.Errorf("roll back %s: %w", w.point, rerr))
				}
				return group, false
			}
			if _, rerr := s.execTx(sqlTx, "ROLLBACK TO "+savepoint); rerr != nil {
				// SQLite already rolled the whole transaction back (an I/O
				// error, a full disk): the parts before this one are gone.
				w.err = errors.Join(err, fmt.Errorf("roll back %s: %w", w.point, rerr))
				abandon(sqlTx, group[i+1:], done, fmt.Errorf("%s rolled the transaction back: %w", w.point, rerr))
				return group, false
			}
			if _, rerr := s.execTx(sqlTx, "RELEASE "+savepoint); rerr != nil {
				w.err = errors.Join(err, fmt.Errorf("roll back %s: %w", w.point, rerr))
				abandon(sqlTx, group[i+1:], done, fmt.Errorf("%s rolled the transaction back: %w", w.point, rerr))
				return group, false
			}
			continue
		}
		if !alone {
			// RELEASE fails when SQLite abandoned the transaction under a
			// function that returned nil anyway: nothing of the group holds.
			if _, err := s.execTx(sqlTx, "RELEASE "+savepoint); err != nil {
				abandon(sqlTx, group[i:], done, fmt.Errorf("release the savepoint of %s: %w", w.point, err))
				return group, false
			}
		}
		w.tx = tx
		done = append(done, w)
	}
	if len(done) == 0 {
		_ = sqlTx.Rollback()
		return group, false
	}
	if s.BeforeCommit != nil {
		for _, w := range done {
			s.BeforeCommit(w.point)
		}
	}
	if err := sqlTx.Commit(); err != nil {
		// A COMMIT that SQLite refused (a deferred constraint) leaves the
		// transaction open on the connection, which database/sql has let go
		// of: end it, or the next BEGIN would fail.
		_, _ = s.db.Exec("ROLLBACK")
		for _, w := range done {
			w.err, w.tx = fmt.Errorf("commit %s: %w", w.point, err), nil
		}
		return group, false
	}
	emitted := false
	for _, w := range done {
		if w.tx.emitted > 0 {
			emitted = true
			// The committed end of the outbox: seqs only grow
			// (AUTOINCREMENT), so the group's highest is the end.
			s.lastSeq = max(s.lastSeq, w.tx.maxSeq)
			// The group's parts ran one after another, each taking the
			// seqs after the one before: their rows come in seq order.
			s.keepRecent(w.tx.rows)
		}
	}
	return group, emitted
}

// The rows recent keeps at most: a stream behind by more reads the rest
// from SQLite.
const (
	maxRecent      = 4096
	maxRecentBytes = 4 << 20
)

// keepRecent adds a commit point's rows, just committed, to recent,
// dropping the oldest half while it holds too many (all of them for one row
// larger than maxRecentBytes: a tool's output can be).
func (s *Store) keepRecent(rows []protocol.OutboundEvent) {
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	for _, ev := range rows {
		s.recent = append(s.recent, ev)
		s.recentBytes += rowBytes(ev)
	}
	if len(s.recent) <= maxRecent && s.recentBytes <= maxRecentBytes {
		return
	}
	drop := 0
	for drop < len(s.recent) && (len(s.recent)-drop > maxRecent || s.recentBytes > maxRecentBytes || drop < len(s.recent)/2) {
		s.recentBytes -= rowBytes(s.recent[drop])
		drop++
	}
	s.recentFloor = s.recent[drop-1].Seq
	s.recent = append([]protocol.OutboundEvent(nil), s.recent[drop:]...)
}

// rowBytes is what a kept row is counted for against maxRecentBytes.
func rowBytes(ev protocol.OutboundEvent) int {
	return len(ev.ID) + len(ev.Type) + len(ev.TS) + len(ev.Data)
}

// recentAfter is EventsAfter from recent, when recent holds every committed
// row after after.
func (s *Store) recentAfter(after int64, limit int) ([]protocol.OutboundEvent, bool) {
	s.recentMu.RLock()
	defer s.recentMu.RUnlock()
	if after < s.recentFloor {
		return nil, false
	}
	i := sort.Search(len(s.recent), func(i int) bool { return s.recent[i].Seq > after })
	n := min(len(s.recent)-i, max(limit, 0))
	if n == 0 {
		return nil, true
	}
	return append([]protocol.OutboundEvent(nil), s.recent[i:i+n]...), true
}

// execTx runs one of the group commit's own statements in sqlTx.
func (s *Store) execTx(sqlTx *sql.Tx, q string) (sql.Result, error) {
	return (&Tx{tx: sqlTx, s: s}).Exec(context.Background(), q)
}

// abandon rolls back a group's transaction that cannot commit and fails the
// writes whose parts ran (done) and those not run yet (rest) with cause.
func abandon(sqlTx *sql.Tx, rest, done []*write, cause error) {
	_ = sqlTx.Rollback() // SQLite may have rolled it back already
	for _, ws := range [][]*write{done, rest} {
		for _, w := range ws {
			if w.err == nil {
				w.err, w.tx = fmt.Errorf("%s: its group commit failed: %w", w.point, cause), nil
			}
		}
	}
}

// GroupSize is the mean number of commit points a transaction held since
// the store opened (1 when no two writes ever met; 0 before any write).
func (s *Store) GroupSize() float64 {
	g := s.groups.Load()
	if g == 0 {
		return 0
	}
	return float64(s.grouped.Load()) / float64(g)
}

// LastSeq is the seq of the newest committed outbox row.
func (s *Store) LastSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeq
}

// Subscribe returns a channel that receives a value (coalesced) after every
// commit that wrote outbox rows; cancel releases it.
func (s *Store) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.subMu.Lock()
	s.subs[ch] = struct{}{}
	s.subMu.Unlock()
	return ch, func() {
		s.subMu.Lock()
		delete(s.subs, ch)
		s.subMu.Unlock()
	}
}

func (s *Store) wake() {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// EventsAfter returns committed outbox rows with seq > after, oldest first,
// at most limit of them.
func (s *Store) EventsAfter(ctx context.Context, after int64, limit int) ([]protocol.OutboundEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if evs, ok := s.recentAfter(after, limit); ok {
		return evs, nil
	}
	return s.tableAfter(ctx, after, limit)
}

// tableAfter is EventsAfter read from the outbox table.
func (s *Store) tableAfter(ctx context.Context, after int64, limit int) ([]protocol.OutboundEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prepareWanted()
	// The limit is written into the query, not bound: SQLite prepares a
	// statement whose LIMIT is a parameter again at every run whose
	// bindings changed (they all do, the driver clears them after each run),
	// which cost a stream's read three times the read itself. The streams
	// ask with one limit, so this is one prepared statement.
	rows, err := reader{s}.QueryContext(ctx,
		"SELECT seq, id, type, ts, data FROM dots_outbox WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT "+strconv.Itoa(max(limit, 0)),
		after, s.lastSeq)
	if err != nil {
		return nil, fmt.Errorf("read outbox after %d: %w", after, err)
	}
	defer rows.Close()
	var out []protocol.OutboundEvent
	for rows.Next() {
		var ev protocol.OutboundEvent
		var data string
		if err := rows.Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.TS, &data); err != nil {
			return nil, fmt.Errorf("read outbox row: %w", err)
		}
		ev.Data = json.RawMessage(data)
		out = append(out, ev)
	}
	return out, rows.Err()
}

// newEventID returns the 128-bit id of an outbox row, in hex: the row's
// time in milliseconds (48 bits) then 80 random bits. An id is unique as a
// random one is (80 random bits a millisecond), and the ids of the rows a
// commit writes are next to each other in the outbox's index of ids, which
// takes them on its last page or two. Random ids landed each on a page of
// its own: a group commit of 35 events wrote about 35 pages of that index
// to the WAL.
func newEventID(now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	if _, err := rand.Read(b[6:]); err != nil {
		panic(fmt.Sprintf("read random bytes: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// NewID returns a random 128-bit id in hex.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("read random bytes: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// KV reads a value of dots_kv; ok is false when the key is absent.
func (s *Store) KV(ctx context.Context, key string) (value string, ok bool, err error) {
	err = s.Read(ctx, func(q Querier) error {
		e := q.QueryRowContext(ctx, "SELECT value FROM dots_kv WHERE key = ?", key).Scan(&value)
		if errors.Is(e, sql.ErrNoRows) {
			return nil
		}
		if e != nil {
			return fmt.Errorf("read %s: %w", key, e)
		}
		ok = true
		return nil
	})
	return value, ok, err
}

// SetKV writes a value of dots_kv in the transaction.
func (t *Tx) SetKV(ctx context.Context, key, value string) error {
	if _, err := t.tx.ExecContext(ctx,
		"INSERT INTO dots_kv(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

// KV reads a value of dots_kv inside the transaction.
func (t *Tx) KV(ctx context.Context, key string) (string, bool, error) {
	var v string
	err := t.tx.QueryRowContext(ctx, "SELECT value FROM dots_kv WHERE key = ?", key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", key, err)
	}
	return v, true, nil
}
