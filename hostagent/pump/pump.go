// Package pump is the host agent's event pump (ref 5.3, 9.3): for each Dot
// whose READY procedure completed on this host, it follows the guest's
// event stream (GET /v1/agent/events/stream?after=CURSOR, on the proven
// channel) and hands the events in batches to the control plane's ingestion
// route of the Dots API, which stores each once by the guest's seq, with the
// cursor, in one transaction. A pump starts after the cursor the ingestion
// answers and, after a dropped stream, opens it again after the last seq
// stored: no event is lost, and none is stored twice. A guest's
// agent.started asks the guest link to push the key and the configuration
// again (ref 4.3).
//
// Pumps starts a pump when the guest link says a Dot's READY procedure
// completed, and stops it when the Dot's Computer is no longer RUNNING and
// Ready or its QEMU changed.
package pump

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/sse"
)

// Streamer opens a guest's event stream: *guestclient.Client's Request.
type Streamer interface {
	Request(ctx context.Context, t guestclient.Target, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error)
}

// Ingester hands a batch of one Dot's guest events to the control plane:
// the Dots API client's IngestEvents. An empty batch answers the cursor.
type Ingester interface {
	IngestEvents(ctx context.Context, host, namespace, dot, dotUID string, events []protocol.OutboundEvent) (wire.Ingested, error)
}

// Defaults of a pump.
const (
	// DefaultBatchSize is the most events one ingestion carries.
	DefaultBatchSize = 500
	// DefaultRetry is the wait before a dropped stream is opened again, or
	// a failed ingestion sent again; it doubles while they keep failing, up
	// to maxRetry.
	DefaultRetry = 500 * time.Millisecond
	maxRetry     = 15 * time.Second
	// maxEventBytes is the largest event handed on as the guest sent it; a
	// larger one is stored as refused, under its seq, so the stream moves
	// on. maxBatchBytes keeps a batch under the ingestion's body limit.
	maxEventBytes = 4 << 20
	maxBatchBytes = wire.MaxEventsBody - maxEventBytes
)

// Pump follows one guest's event stream into the control plane's log.
type Pump struct {
	// Host is this agent's Host; Key and DotUID name the Dot.
	Host   string
	Key    types.NamespacedName
	DotUID string
	// Target is the guest: its QEMU, port and token.
	Target guestclient.Target
	Guest  Streamer
	Ingest Ingester
	// Started is called for every agent.started the guest sends (it must
	// not block): the engine restarted and holds no key.
	Started func()
	// BatchSize and Retry are the defaults above when zero. FlushDelay,
	// when set, is how long the first event of a batch waits for others;
	// unset, a batch goes as soon as nothing more is queued (flushAfter).
	BatchSize  int
	FlushDelay time.Duration
	Retry      time.Duration
	Log        logr.Logger
}

// ErrDotGone is returned by Run when the control plane takes no more events
// for the Dot the pump was started for: it was deleted, made again under its
// name, or its Computer moved off this host. A new READY starts a new pump.
var ErrDotGone = errors.New("the control plane takes no more events of this Dot from this host")

// Run pumps until ctx ends (nil) or the Dot is gone (ErrDotGone).
func (p *Pump) Run(ctx context.Context) error {
	retry := p.retry()
	cursor, err := p.cursor(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	for {
		var stored bool
		cursor, stored, err = p.follow(ctx, cursor)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrDotGone):
			return err
		case stored:
			// The stream gave something before it dropped: open it again
			// at once, and start the backoff over.
			p.Log.V(1).Info("the guest's event stream ended; opening it again", "cursor", cursor, "err", err)
			retry = p.retry()
			continue
		}
		p.Log.V(1).Info("the guest's event stream ended; opening it again", "cursor", cursor, "err", err, "after", retry)
		if !sleep(ctx, retry) {
			return nil
		}
		retry = min(2*retry, maxRetry)
	}
}

func (p *Pump) retry() time.Duration { return cmp.Or(p.Retry, DefaultRetry) }

// cursor asks the control plane where the Dot's log stands: the highest
// guest seq stored.
func (p *Pump) cursor(ctx context.Context) (int64, error) {
	retry := p.retry()
	for {
		got, err := p.Ingest.IngestEvents(ctx, p.Host, p.Key.Namespace, p.Key.Name, p.DotUID, nil)
		if err == nil {
			return got.Cursor, nil
		}
		if gone(err) {
			return 0, fmt.Errorf("ask the Dot's cursor: %v: %w", err, ErrDotGone)
		}
		p.Log.Info("the control plane did not answer the Dot's cursor; asking again", "err", err.Error())
		if !sleep(ctx, retry) {
			return 0, ctx.Err()
		}
		retry = min(2*retry, maxRetry)
	}
}

// gone: the ingestion refuses the Dot itself, not the batch.
func gone(err error) bool {
	switch dotsclient.StatusOf(err) {
	case http.StatusNotFound, http.StatusForbidden:
		return true
	case http.StatusConflict:
		return dotsclient.CodeOf(err) == wire.CodeDotChanged || dotsclient.CodeOf(err) == wire.CodeDotDeleting
	}
	return false
}

// follow reads one connection of the stream after cursor, handing its
// events on in batches, until the stream drops or ctx ends. It returns the
// cursor to go on after, whether anything was stored, and why it ended.
func (p *Pump) follow(ctx context.Context, cursor int64) (int64, bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	path := protocol.AgentRoutePrefix + protocol.RouteEventsStream + "?" + protocol.StreamAfterQuery + "=" + strconv.FormatInt(cursor, 10)
	resp, err := p.Guest.Request(sctx, p.Target, http.MethodGet, path, nil, http.Header{"Accept": {"text/event-stream"}})
	if err != nil {
		return cursor, false, fmt.Errorf("open the guest's event stream: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Never the guest's text (ref 4.3): its status says enough.
		return cursor, false, fmt.Errorf("open the guest's event stream: status %d", resp.StatusCode)
	}
	msgs := make(chan message, cmp.Or(p.BatchSize, DefaultBatchSize))
	ended := make(chan error, 1)
	go func() {
		ended <- readStream(sctx, resp.Body, msgs)
		close(msgs)
	}()

	b := batcher{pump: p, cursor: cursor, last: cursor}
	var flush <-chan time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return b.cursor, b.stored, ctx.Err()
		case <-flush:
			flush = nil
			if err := b.flush(ctx); err != nil {
				return b.cursor, b.stored, err
			}
		case m, ok := <-msgs:
			if !ok {
				// The stream dropped: what was read is stored before it
				// is opened again after the cursor.
				if err := b.flush(ctx); err != nil {
					return b.cursor, b.stored, err
				}
				return b.cursor, b.stored, cmp.Or(<-ended, io.ErrUnexpectedEOF)
			}
			full, err := b.add(ctx, m)
			if err != nil {
				return b.cursor, b.stored, err
			}
			switch {
			case full:
				flush = nil
				if err := b.flush(ctx); err != nil {
					return b.cursor, b.stored, err
				}
			case flush == nil && len(b.events) > 0:
				delay, now := p.flushAfter(len(msgs))
				if now {
					if err := b.flush(ctx); err != nil {
						return b.cursor, b.stored, err
					}
					continue
				}
				if delay == 0 {
					continue // what is queued joins the batch first
				}
				if timer == nil {
					timer = time.NewTimer(delay)
				} else {
					timer.Reset(delay)
				}
				flush = timer.C
			}
		}
	}
}

// flushAfter says when a batch whose newest event was just read goes, with
// queued events read from the stream and not yet taken. With a FlushDelay,
// after it (the first event waits for others). Without one, at once when
// nothing more is queued: a lone event (a chat's answer) waits for nobody,
// and the events that arrive while a batch is being stored make the next
// one, so a burst is still sent in few batches.
func (p *Pump) flushAfter(queued int) (delay time.Duration, now bool) {
	if p.FlushDelay > 0 {
		return p.FlushDelay, false
	}
	if queued == 0 {
		return 0, true
	}
	// Take what is queued first; the batch goes when the queue is empty.
	return 0, false
}

// batcher gathers one connection's events into batches.
type batcher struct {
	pump *Pump
	// cursor is the control plane's, after the last ingestion; last is the
	// highest seq taken into a batch.
	cursor, last int64
	events       []protocol.OutboundEvent
	bytes        int
	stored       bool
}

// add takes one message of the stream, and says whether the batch is full.
// A message the guest already sent (its seq not above the last one) is
// left out: ingestion takes only increasing seqs.
func (b *batcher) add(ctx context.Context, m message) (bool, error) {
	p := b.pump
	ev, problem := eventOf(m)
	switch {
	case ev.Seq == 0:
		p.Log.Info("the guest's event stream sent a message without a seq; it is left out", "problem", problem)
		return false, nil
	case ev.Seq <= b.last:
		p.Log.V(1).Info("the guest's event stream sent a seq again; it is left out", "seq", ev.Seq, "last", b.last)
		return false, nil
	case problem != "":
		// Stored as refused (guest.event.refused) by the ingestion, under
		// its seq, so the stream moves on.
		p.Log.Info("the guest sent an event that cannot be read", "seq", ev.Seq, "problem", problem)
	default:
		if _, err := protocol.ParseOutbound(ev); err != nil {
			p.Log.Info("the guest sent an event the protocol refuses; it is logged as refused", "seq", ev.Seq, "problem", err.Error())
		} else if ev.Type == protocol.EventAgentStarted && p.Started != nil {
			p.Started()
		} else if ev.Type == protocol.EventOutboxReset {
			// The cursor rule (ref 5.3): the guest lost its outbox; it moved
			// its seq on past the cursor, so the stream goes on from there.
			p.Log.Info("the guest's outbox started over past the log's cursor; events it wrote before are not in the log", "seq", ev.Seq)
		}
	}
	size := len(ev.Data) + len(ev.ID) + len(ev.Type) + len(ev.TS) + 64
	if len(b.events) > 0 && b.bytes+size > maxBatchBytes {
		if err := b.flush(ctx); err != nil {
			return false, err
		}
	}
	b.events = append(b.events, ev)
	b.bytes += size
	b.last = ev.Seq
	return len(b.events) >= min(cmp.Or(p.BatchSize, DefaultBatchSize), wire.MaxEventBatch), nil
}

// flush hands the batch to the control plane, again until it takes it (the
// ingestion is idempotent by seq), or the Dot is gone, or ctx ends.
func (b *batcher) flush(ctx context.Context) error {
	if len(b.events) == 0 {
		return nil
	}
	p := b.pump
	retry := p.retry()
	for {
		got, err := p.Ingest.IngestEvents(ctx, p.Host, p.Key.Namespace, p.Key.Name, p.DotUID, b.events)
		if err == nil {
			// Stored, with the cursor, in the control plane's one
			// transaction; the pump holds no cursor of its own, so a pump
			// killed here asks it again and goes on after it.
			crashpoint.Hit(crashpoint.PumpStored)
			b.cursor = max(got.Cursor, b.cursor)
			b.stored = true
			b.events, b.bytes = b.events[:0], 0
			return nil
		}
		if gone(err) {
			return fmt.Errorf("hand on a batch of %d events: %v: %w", len(b.events), err, ErrDotGone)
		}
		p.Log.Info("the control plane did not take a batch of the guest's events; sending it again", "events", len(b.events), "err", err.Error())
		if !sleep(ctx, retry) {
			return ctx.Err()
		}
		retry = min(2*retry, maxRetry)
	}
}

// eventOf reads an event from a message of the stream. A message that is
// not an event (not JSON, too large) keeps its seq, from its id line, and
// stands for the event with the problem as its data: the ingestion stores
// it as refused.
func eventOf(m message) (protocol.OutboundEvent, string) {
	idSeq, idErr := strconv.ParseInt(m.id, 10, 64)
	if idErr != nil || idSeq < 0 {
		idSeq = 0
	}
	problem := m.problem
	var ev protocol.OutboundEvent
	if problem == "" {
		// Read as strictly as the guest reads the host's bodies (a guest is
		// untrusted from here): one JSON value, the envelope's keys exactly.
		// The size is readStream's bound. The data's own keys are the
		// schemas' (ParseOutbound), which strip an unknown one (ref 5.3).
		if err := protocol.DecodeBytes(m.data, &ev); err != nil {
			problem = "the message is not an event of the protocol: " + err.Error()
		}
	}
	if problem != "" {
		data, _ := json.Marshal(problem)
		return protocol.OutboundEvent{Seq: idSeq, Data: data}, problem
	}
	// The id line is what a reconnect resumes after (Last-Event-ID): it
	// names the seq when it is there.
	if idSeq > 0 {
		ev.Seq = idSeq
	}
	if len(ev.Data) == 0 {
		ev.Data = json.RawMessage("null")
	}
	return ev, ""
}

// message is one message of the event stream: its id line and its data
// lines, joined.
type message struct {
	id   string
	data []byte
	// problem says why data is not the message's (it was too large).
	problem string
}

// readStream reads the messages of an event stream (text/event-stream, as
// the engine writes it: "id: SEQ" and "data: JSON" lines, comment lines
// such as ": keep-alive", a blank line ending each message) into out, until
// the stream ends or ctx does. A message cut by the end of the stream is
// not handed on: it is read again after the cursor.
func readStream(ctx context.Context, r io.Reader, out chan<- message) error {
	sr := sse.NewReader(r, maxEventBytes)
	for {
		sm, err := sr.Next()
		if err != nil {
			return err
		}
		m := message{id: sm.ID, data: sm.Data}
		switch {
		case sm.TooLarge:
			// Not handed on: the message stands as refused, under its id.
			m.data, m.problem = nil, fmt.Sprintf("the message is larger than %d bytes", maxEventBytes)
		case len(sm.Data) == 0:
			continue // an id alone, or an empty message: nothing to store
		}
		select {
		case out <- m:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
