package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/sse"
)

// StreamOptions choose a live stream of the event log.
type StreamOptions struct {
	// Namespace and Dot name one Dot; both empty stream every Dot the
	// caller may read.
	Namespace, Dot string
	// Types keeps the events of these types; empty keeps every type.
	Types []string
	// After is the id to begin after: nil begins at the end of the log, 0
	// replays the whole log first.
	After *int64
	// Retry is the first wait before connecting again after the stream
	// was cut (1 s when 0); it doubles on each failure in a row, up to 30 s.
	Retry time.Duration
}

// The largest message of a stream the client reads: an event is one data
// line.
const maxStreamLine = 64 << 20

// Stream follows a live stream of the event log (wire.StreamPath or
// wire.DotStreamPath). Each event is delivered once, in id order, on the
// first channel: when the stream is cut (the server cut off a client that
// did not keep up, it restarted, the network failed), Stream connects
// again with Last-Event-ID and the server replays what was missed. Both
// channels close when ctx ends, or after an error answer no retry would
// change (a 4xx: no right, no such Dot), which the error channel gets
// first. A consumer that does not keep reading the events falls behind and
// is cut off and resumed like any other.
func (c *Client) Stream(ctx context.Context, o StreamOptions) (<-chan wire.StreamEvent, <-chan error) {
	events := make(chan wire.StreamEvent)
	errc := make(chan error, 1)
	path := wire.StreamPath
	if o.Namespace != "" || o.Dot != "" {
		path = wire.DotStreamPath(o.Namespace, o.Dot)
	}
	retry := o.Retry
	if retry <= 0 {
		retry = time.Second
	}
	go func() {
		defer close(errc)
		defer close(events)
		s := &streamReader{c: c, path: path, types: o.Types, events: events}
		if o.After != nil {
			s.cursor, s.known = *o.After, true
		}
		wait := retry
		for {
			got, err := s.once(ctx)
			if ctx.Err() != nil {
				return
			}
			if s := StatusOf(err); s >= 400 && s < 500 {
				errc <- err
				return
			}
			if got {
				wait = retry
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, 30*time.Second)
		}
	}()
	return events, errc
}

// streamReader is one Stream's connections, one after the other.
type streamReader struct {
	c      *Client
	path   string
	types  []string
	events chan<- wire.StreamEvent
	// cursor is the id to resume after, known once the caller gave one or
	// the server told one.
	cursor int64
	known  bool
}

// once reads one connection of the stream until it ends, and says whether
// it got anything (an event or an id), so that the wait before the next
// does not grow.
func (s *streamReader) once(ctx context.Context) (bool, error) {
	q := wire.StreamQuery{Types: s.types}.Values()
	resp, e, err := s.c.send(ctx, http.MethodGet, s.path, q.Encode(), nil, func(req *http.Request) {
		req.Header.Set("Accept", wire.StreamContentType)
		if s.known {
			req.Header.Set(wire.LastEventIDHeader, strconv.FormatInt(s.cursor, 10))
		}
	})
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return false, s.c.failed(e, resp.StatusCode, data)
	}
	got := false
	sr := sse.NewReader(resp.Body, maxStreamLine)
	for {
		m, err := sr.Next()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the server never ends a stream
		}
		if err != nil {
			return got, fmt.Errorf("GET %s: %w", s.path, err)
		}
		if m.TooLarge {
			return got, fmt.Errorf("GET %s: a message of the stream is longer than %d bytes", s.path, maxStreamLine)
		}
		if !m.HasID {
			continue
		}
		// An id alone moves the resume point; data is an event.
		n, perr := strconv.ParseInt(m.ID, 10, 64)
		if perr != nil {
			return got, fmt.Errorf("GET %s: the stream sent id %q, not an event id", s.path, m.ID)
		}
		if len(m.Data) > 0 {
			var e wire.StreamEvent
			if err := json.Unmarshal(m.Data, &e); err != nil {
				return got, fmt.Errorf("GET %s: event %d does not read: %w", s.path, n, err)
			}
			// An event at or before the cursor was delivered already (the
			// server does not send one; this keeps the promise whatever it
			// does).
			if !s.known || e.ID > s.cursor {
				select {
				case s.events <- e:
				case <-ctx.Done():
					return got, ctx.Err()
				}
			}
		}
		if !s.known || n > s.cursor {
			s.cursor, s.known = n, true
		}
		got = true
	}
}
