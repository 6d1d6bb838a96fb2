package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// OutboxChannel is the PostgreSQL notification channel of the outbox: a row
// enqueued notifies it with its Dot (OutboxPayload) when its transaction
// commits, so a row is announced only once it can be read.
const OutboxChannel = "dots_outbox"

// OutboxPayload is the payload of an outbox notification: the Dot's
// namespace, name and UID.
func OutboxPayload(d Dot) string { return d.Namespace + "/" + d.Name + "/" + d.UID }

// ParseOutboxPayload reads OutboxPayload back.
func ParseOutboxPayload(p string) (Dot, bool) {
	parts := strings.SplitN(p, "/", 3)
	if len(parts) != 3 {
		return Dot{}, false
	}
	d := Dot{Namespace: parts[0], Name: parts[1], UID: parts[2]}
	return d, d.valid() == nil
}

// Changes follows one notification channel and keeps its recent payloads,
// numbered, so a reader that comes back with the cursor of its last read
// gets what was notified in between (a long poll misses nothing between two
// polls). A cursor is only good for one Changes that never lost its
// listening connection: its epoch changes on each (re)connection, when
// notifications may have been lost, and a cursor of another epoch, or one
// older than the kept payloads, is told to read everything again.
type Changes struct {
	store   *Store
	channel string
	keep    int
	log     logr.Logger

	mu sync.Mutex
	// listening: LISTEN took on the current connection; the payloads of
	// this epoch are all of them.
	listening bool
	epoch     string
	next      int64 // the number of the next payload
	kept      []string
	changed   chan struct{} // closed and replaced on each payload or epoch

	// shared is set on a Store's Wakeups: its readers share one listener.
	shared *sharing
}

// Wakeups is the Store's one follower of channel that keeps nothing: a
// wake-up alone, as NewChanges with keep 0, shared by every reader of this
// Store. Each reader calls its Run as it would its own; one connection
// listens however many do (each is a PostgreSQL backend of about 2 MiB
// that waits). log names it in the log, as the first reader calls it.
func (s *Store) Wakeups(channel string, log logr.Logger) *Changes {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.wakeups[channel]; ok {
		return c
	}
	if s.wakeups == nil {
		s.wakeups = map[string]*Changes{}
	}
	c := s.NewChanges(channel, 0, log)
	c.shared = &sharing{}
	s.wakeups[channel] = c
	return c
}

// sharing counts the readers running a shared Changes.
type sharing struct {
	mu   sync.Mutex
	runs int
	stop context.CancelFunc
	done chan struct{} // closed when the listener stopped
}

func (s *sharing) run(ctx context.Context, c *Changes) error {
	s.mu.Lock()
	if s.runs == 0 {
		if s.done != nil {
			// The last listener may still be stopping: two must never
			// follow at once, or its end would mark the new one's epoch
			// as not listening.
			<-s.done
		}
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		s.stop, s.done = cancel, done
		go func() {
			defer close(done)
			_ = c.follow(lctx)
		}()
	}
	s.runs++
	s.mu.Unlock()

	<-ctx.Done()
	s.mu.Lock()
	s.runs--
	var stopped chan struct{}
	if s.runs == 0 {
		s.stop()
		stopped = s.done
	}
	s.mu.Unlock()
	if stopped != nil {
		<-stopped
	}
	return nil
}

// Cursor is where a reader of Changes stands: an epoch and a count.
type Cursor struct {
	Epoch string
	N     int64
}

// String is the cursor as a reader sends it back: EPOCH:N.
func (c Cursor) String() string {
	if c.Epoch == "" {
		return ""
	}
	return c.Epoch + ":" + strconv.FormatInt(c.N, 10)
}

// ParseCursor reads Cursor.String back; the empty string is the zero
// Cursor (read everything).
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	epoch, n, ok := strings.Cut(s, ":")
	v, err := strconv.ParseInt(n, 10, 64)
	if !ok || epoch == "" || err != nil || v < 0 {
		return Cursor{}, fmt.Errorf("cursor %q is not EPOCH:N as the last answer gave it", s)
	}
	return Cursor{Epoch: epoch, N: v}, nil
}

// NewChanges follows channel, keeping the last keep payloads. With keep 0
// it keeps none and is a wake-up alone: Since's changed channel closes at
// each notification, and a reader reads its table again (the event log's
// live streams, EventsChannel).
func (s *Store) NewChanges(channel string, keep int, log logr.Logger) *Changes {
	c := &Changes{store: s, channel: channel, keep: keep, log: log, changed: make(chan struct{})}
	c.newEpoch(false)
	return c
}

// Since answers the payloads notified after cur, the cursor to come back
// with, and whether they are all of them: false when cur is of another epoch
// or older than what is kept, and the reader must read the whole state
// again. changed is closed at the next payload or epoch, for a reader that
// got nothing and waits. While nothing listens (at the start, after a lost
// connection), a reader that read everything in this epoch gets nothing
// more: the epoch changes when listening begins, and it reads everything
// again then.
func (c *Changes) Since(cur Cursor) (payloads []string, next Cursor, complete bool, changed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next = Cursor{Epoch: c.epoch, N: c.next}
	first := c.next - int64(len(c.kept))
	if cur.Epoch != c.epoch || cur.N < first || cur.N > c.next {
		return nil, next, false, c.changed
	}
	if !c.listening {
		return nil, next, true, c.changed
	}
	return append([]string(nil), c.kept[cur.N-first:]...), next, true, c.changed
}

// Listening says whether the notifications are heard now.
func (c *Changes) Listening() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listening
}

// Run listens until ctx ends, on a connection of its own from the pool, and
// listens again after a lost connection. When it ends, the readers waiting
// on a changed channel are woken (an epoch nothing listens in), so none
// waits for its own timeout. A Store's Wakeups is followed while any of its
// readers runs it: the first Run listens, the last to end stops.
func (c *Changes) Run(ctx context.Context) error {
	if c.shared != nil {
		return c.shared.run(ctx, c)
	}
	return c.follow(ctx)
}

func (c *Changes) follow(ctx context.Context) error {
	defer c.newEpoch(false)
	backoff := 100 * time.Millisecond
	for {
		err := c.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Info("lost the database's notifications; listening again", "channel", c.channel, "err", err.Error())
		c.newEpoch(false)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *Changes) listen(ctx context.Context) error {
	conn, err := c.store.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection leaves the pool: a connection that listened must not
	// serve other queries.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx))
	if _, err := pc.Exec(ctx, "LISTEN "+c.channel); err != nil {
		return err
	}
	// Whatever was notified before LISTEN took is not kept: readers of an
	// older epoch read everything again.
	c.newEpoch(true)
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		c.add(n.Payload)
	}
}

func (c *Changes) add(payload string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kept = append(c.kept, payload)
	if len(c.kept) > 2*c.keep {
		// Trimmed now and then rather than on every payload.
		c.kept = append(c.kept[:0], c.kept[len(c.kept)-c.keep:]...)
	}
	c.next++
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Changes) newEpoch(listening bool) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch, c.next, c.kept, c.listening = hex.EncodeToString(b), 0, nil, listening
	close(c.changed)
	c.changed = make(chan struct{})
}
