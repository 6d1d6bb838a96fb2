package dotsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// Feed follows the event log for the live streams: one reader of the table
// for every stream of the server, which hands each new event to the
// streams that want it (fan-out in memory). A PostgreSQL notification
// (store.EventsChannel) wakes it; it then reads the table after the last id
// it read, so order and completeness come from the table (ids become
// visible in id order), and a notification lost with a connection costs
// nothing but the wait for the next one or the poll.
//
// Each stream's queue is bounded: a stream whose client does not keep up is
// cut off when its queue is full, never queued for without bound; its
// client resumes from the database with Last-Event-ID.
type Feed struct {
	store     *store.Store
	changes   *store.Changes
	poll      time.Duration
	gather    time.Duration
	page      int
	maxFrames int
	maxBytes  int
	log       logr.Logger
	ready     chan struct{} // closed once last is known
	done      chan struct{} // closed when Run has ended
	mu        sync.Mutex
	last      int64 // the highest id handed to the subscriptions
	subs      map[*subscription]struct{}
	stopped   bool
	readyOnce sync.Once
	stopOnce  sync.Once
}

// FeedOptions configure NewFeed.
type FeedOptions struct {
	Store *store.Store
	// Buffer is the most events a stream's queue holds (1024 when 0), and
	// BufferBytes the most bytes (8 MiB when 0): a stream whose client
	// falls further behind is cut off.
	Buffer      int
	BufferBytes int
	// Poll reads the table when no notification came for this long (10 s
	// when 0): a safety net only, notifications wake the reader at once.
	Poll time.Duration
	// Gather is the least time between two reads of the table (5 ms when
	// 0, none when negative): an event alone goes at once, and under load
	// the events of a few milliseconds go together, one read of the table
	// and one write to each client for all of them rather than one each.
	Gather time.Duration
	Log    logr.Logger
}

// The feed's defaults.
const (
	defaultStreamBuffer      = 1024
	defaultStreamBufferBytes = 8 << 20
	defaultFeedPoll          = 10 * time.Second
	defaultFeedGather        = 5 * time.Millisecond
	// feedPage is the most events one read of the table takes.
	feedPage = 1000
)

// Why a subscription ended.
var (
	errSlowReader  = errors.New("the client did not keep up with the stream")
	errFeedStopped = errors.New("the server stops")
)

// NewFeed returns a feed of the event log in o.Store; Run follows it.
func NewFeed(o FeedOptions) *Feed {
	f := &Feed{
		store: o.Store, poll: o.Poll, gather: o.Gather, page: feedPage, maxFrames: o.Buffer, maxBytes: o.BufferBytes, log: o.Log,
		ready: make(chan struct{}), done: make(chan struct{}), subs: map[*subscription]struct{}{},
	}
	if f.log.GetSink() == nil {
		f.log = logr.Discard()
	}
	if f.poll <= 0 {
		f.poll = defaultFeedPoll
	}
	if f.gather == 0 {
		f.gather = defaultFeedGather
	}
	if f.maxFrames <= 0 {
		f.maxFrames = defaultStreamBuffer
	}
	if f.maxBytes <= 0 {
		f.maxBytes = defaultStreamBufferBytes
	}
	// A wake-up alone (nothing kept), the Store's one listener shared.
	f.changes = o.Store.Wakeups(store.EventsChannel, f.log.WithName("events-changes"))
	return f
}

// Run follows the log until ctx ends, then ends every stream.
func (f *Feed) Run(ctx context.Context) error {
	defer f.stop()
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		_ = f.changes.Run(ctx)
	}()
	defer func() { <-listening }()

	backoff := newBackoff()
	for {
		last, err := f.store.LastEventID(ctx)
		if err == nil {
			f.mu.Lock()
			f.last = last
			f.mu.Unlock()
			f.readyOnce.Do(func() { close(f.ready) })
			break
		}
		f.log.Error(err, "the live streams cannot read the event log; trying again")
		if !backoff.wait(ctx) {
			return nil
		}
	}
	backoff = newBackoff()
	var cur store.Cursor
	poll := time.NewTimer(f.poll)
	defer poll.Stop()
	var lastRead time.Time
	for {
		// Since before the read: a notification of a commit the read
		// misses closes changed, and the next turn reads it.
		_, next, _, changed := f.changes.Since(cur)
		cur = next
		if wait := f.gather - time.Since(lastRead); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		lastRead = time.Now()
		if err := f.readNew(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			f.log.Error(err, "the live streams cannot read the event log; trying again")
			if !backoff.wait(ctx) {
				return nil
			}
			continue
		}
		backoff = newBackoff()
		poll.Reset(f.poll)
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-poll.C:
		}
	}
}

// readNew reads the events after the last one handed on, page by page, and
// hands them to the subscriptions.
func (f *Feed) readNew(ctx context.Context) error {
	for {
		f.mu.Lock()
		after := f.last
		f.mu.Unlock()
		events, err := f.store.EventsSince(ctx, store.TailQuery{After: after, Limit: f.page})
		if err != nil {
			return err
		}
		if len(events) == 0 {
			return nil
		}
		frames := make([]*frame, len(events))
		for i, e := range events {
			frames[i] = newFrame(e, f.log)
		}
		f.dispatch(frames)
		if len(events) < f.page {
			return nil
		}
	}
}

// dispatch hands frames, the next events of the log, to every
// subscription. It holds the feed's lock, so a subscription made meanwhile
// either gets them all or was made after: its position (subscribe) says
// which.
func (f *Feed) dispatch(frames []*frame) {
	last := frames[len(frames)-1].id
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if !s.offer(frames, last) {
			delete(f.subs, s)
		}
	}
	f.last = last
}

// subscribe begins handing the events after the feed's position to a new
// subscription of the Dot dotUID ("" for every Dot) and the types (every
// type when empty). The subscription's position is where the feed stood:
// every event it wants after it will be in its queue. It waits until Run
// knows where the log ends.
func (f *Feed) subscribe(ctx context.Context, dotUID string, types []string) (*subscription, error) {
	select {
	case <-f.ready:
	case <-f.done:
		return nil, errFeedStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	sctx, cancel := context.WithCancelCause(ctx)
	s := &subscription{
		ctx: sctx, cancel: cancel, dotUID: dotUID, types: types,
		maxFrames: f.maxFrames, maxBytes: f.maxBytes, wake: make(chan struct{}, 1),
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		cancel(errFeedStopped)
		return nil, errFeedStopped
	}
	s.pos = f.last
	f.subs[s] = struct{}{}
	return s, nil
}

// unsubscribe stops handing events to s.
func (f *Feed) unsubscribe(s *subscription) {
	f.mu.Lock()
	delete(f.subs, s)
	f.mu.Unlock()
	s.cancel(context.Canceled)
}

// available says whether the feed serves streams: false once it stopped.
func (f *Feed) available() bool {
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}

// subscribers counts the open subscriptions, for tests.
func (f *Feed) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

func (f *Feed) stop() {
	f.stopOnce.Do(func() {
		f.mu.Lock()
		f.stopped = true
		subs := f.subs
		f.subs = map[*subscription]struct{}{}
		f.mu.Unlock()
		for s := range subs {
			s.cancel(errFeedStopped)
		}
		close(f.done)
	})
}

// frame is one event of the log as every stream sends it, encoded once for
// all of them.
type frame struct {
	id        int64
	namespace string
	dotUID    string
	typ       string
	// sse is the whole message: id, event and data lines and the blank
	// line that ends it.
	sse []byte
}

func newFrame(e store.Event, log logr.Logger) *frame {
	ev := wire.StreamEvent{Event: wireEvent(e), Namespace: e.Dot.Namespace, Dot: e.Dot.Name, DotUID: e.Dot.UID}
	data, err := json.Marshal(ev)
	if err != nil {
		// The data is jsonb from the table, so this does not happen; the
		// event still goes, without its data, rather than leave a gap.
		log.Error(err, "an event of the log does not encode; it is streamed without its data", "id", e.ID)
		ev.Data = nil
		data, _ = json.Marshal(ev)
	}
	var b bytes.Buffer
	b.Grow(len(data) + len(e.Type) + 40)
	b.WriteString("id: ")
	b.WriteString(strconv.FormatInt(e.ID, 10))
	// A line break would end the field early; the log's types have none,
	// and one that did would go as an unnamed message.
	if e.Type != "" && !strings.ContainsAny(e.Type, "\r\n") {
		b.WriteString("\nevent: ")
		b.WriteString(e.Type)
	}
	b.WriteString("\ndata: ")
	b.Write(data) // json.Marshal escapes line breaks: one line
	b.WriteString("\n\n")
	return &frame{id: e.ID, namespace: e.Dot.Namespace, dotUID: e.Dot.UID, typ: e.Type, sse: b.Bytes()}
}

// subscription is one stream's queue of the events the feed hands on.
type subscription struct {
	// ctx ends when the subscription does: cut off (errSlowReader), the
	// feed stopped (errFeedStopped), or the request's own context.
	ctx    context.Context
	cancel context.CancelCauseFunc
	dotUID string
	types  []string

	maxFrames, maxBytes int
	// wake holds a token while the queue has frames not taken.
	wake chan struct{}

	mu    sync.Mutex
	queue []*frame
	bytes int
	// pos is the feed's position as of the queue: every event the
	// subscription wants up to pos is in the queue or was taken.
	pos int64
}

func (s *subscription) wants(f *frame) bool {
	return (s.dotUID == "" || f.dotUID == s.dotUID) && (len(s.types) == 0 || slices.Contains(s.types, f.typ))
}

// offer queues the frames s wants and moves its position to last; false
// when s ended or is cut off now because its queue is full.
func (s *subscription) offer(frames []*frame, last int64) bool {
	if s.ctx.Err() != nil {
		return false
	}
	s.mu.Lock()
	added := false
	for _, f := range frames {
		if !s.wants(f) {
			continue
		}
		if len(s.queue) >= s.maxFrames || s.bytes+len(f.sse) > s.maxBytes {
			s.queue, s.bytes = nil, 0
			s.mu.Unlock()
			s.cancel(errSlowReader)
			return false
		}
		s.queue = append(s.queue, f)
		s.bytes += len(f.sse)
		added = true
	}
	s.pos = last
	s.mu.Unlock()
	if added {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// take empties the queue: its frames, in id order, and the position as of
// them.
func (s *subscription) take() ([]*frame, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue, s.bytes = nil, 0
	return q, s.pos
}

// position is the subscription's position, for a stream that begins at the
// end of the log.
func (s *subscription) position() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos
}

// backoff waits longer after each failure, up to 5 s.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 100 * time.Millisecond} }

// wait sleeps, and says false when ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.d)
	defer t.Stop()
	b.d = min(2*b.d, 5*time.Second)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
