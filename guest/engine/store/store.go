// Package store is the engine's one SQLite file (ref 8.8): the Dot's tables,
// the transcripts and the outbox. It is the one place a write transaction
// begins and ends (Store.Write), so every commit point is a single
// transaction that carries the outbox rows describing it, and a row is handed
// to the event streams only after its transaction committed.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	s := &Store{db: db, path: path, now: time.Now, subs: map[chan struct{}]struct{}{}}
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

// Tx is one write transaction. Emit adds outbox rows to it.
type Tx struct {
	tx      *sql.Tx
	s       *Store
	emitted int
	after   []func()
}

// Exec runs a statement inside the transaction.
func (t *Tx) Exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, q, args...)
}

// Query runs a query inside the transaction.
func (t *Tx) Query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, q, args...)
}

// QueryRow runs a one-row query inside the transaction.
func (t *Tx) QueryRow(ctx context.Context, q string, args ...any) *sql.Row {
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
		if err := tx.tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(seq), 0) FROM dots_outbox").Scan(&last); err != nil {
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
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO dots_outbox(seq, id, type, ts, data) VALUES (?, ?, ?, ?, ?)",
			cursor+1, NewID(), protocol.EventOutboxReset, ts, string(raw)); err != nil {
			return fmt.Errorf("write %s to the outbox: %w", protocol.EventOutboxReset, err)
		}
		tx.emitted++
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
	id := NewID()
	ts := t.s.now().UTC().Format("2006-01-02T15:04:05.000Z")
	res, err := t.tx.ExecContext(ctx, "INSERT INTO dots_outbox(id, type, ts, data) VALUES (?, ?, ?, ?)", id, typ, ts, string(raw))
	if err != nil {
		return 0, fmt.Errorf("write %s event to the outbox: %w", typ, err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("read seq of %s event: %w", typ, err)
	}
	t.emitted++
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
	return fn(s.db)
}

// Write runs fn in one write transaction named point (a commit point of ref
// 8.8) and commits it; fn's error rolls everything back, its events
// included. The streams are woken after the commit.
func (s *Store) Write(ctx context.Context, point string, fn func(tx *Tx) error) error {
	s.mu.Lock()
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("begin %s: %w", point, err)
	}
	tx := &Tx{tx: sqlTx, s: s}
	if err := fn(tx); err != nil {
		rerr := sqlTx.Rollback()
		s.mu.Unlock()
		if rerr != nil {
			return errors.Join(err, fmt.Errorf("roll back %s: %w", point, rerr))
		}
		return err
	}
	if s.BeforeCommit != nil {
		s.BeforeCommit(point)
	}
	if err := sqlTx.Commit(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("commit %s: %w", point, err)
	}
	if tx.emitted > 0 {
		// Read the highest seq while still holding the connection: this is
		// the committed end of the outbox.
		_ = s.db.QueryRowContext(context.Background(), "SELECT COALESCE(MAX(seq), 0) FROM dots_outbox").Scan(&s.lastSeq)
	}
	s.mu.Unlock()
	if s.AfterCommit != nil {
		s.AfterCommit(point)
	}
	for _, f := range tx.after {
		f()
	}
	if tx.emitted > 0 {
		s.wake()
	}
	return nil
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
	s.mu.Lock()
	defer s.mu.Unlock()
	rows, err := s.db.QueryContext(ctx,
		"SELECT seq, id, type, ts, data FROM dots_outbox WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
		after, s.lastSeq, limit)
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
