package dotsapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// replayPage is the most events one read of a replay takes.
const replayPage = 1000

// errAccessRevoked ends a Dot's stream whose caller lost the right to read
// it.
var errAccessRevoked = errors.New("the caller may no longer read the Dot's events")

// streamAll serves the live stream of every Dot the caller may read
// (wire.StreamPath). The path is open to every authenticated user; each
// event is sent only if the authorizer lets the caller get dots/events in
// the event's namespace.
func (h *Handler) streamAll(w http.ResponseWriter, r *http.Request) error {
	u, err := callerOf(r)
	if err != nil {
		return err
	}
	q, err := parseStreamQuery(r)
	if err != nil {
		return err
	}
	access := h.newStreamAccess(u, "")
	return h.serveStream(w, r, streamScope{query: q, visible: func(ctx context.Context, f *frame) (bool, error) {
		return access.allowed(ctx, f.namespace), nil
	}, stillValid: func(ctx context.Context) error {
		return access.stillValid(ctx, "")
	}})
}

// streamDot serves the live stream of one Dot (wire.DotStreamPath): the
// events of the Dot of that name now (its UID), as the events route reads.
// The caller's right is asked again now and then; a stream whose caller
// lost it ends.
func (h *Handler) streamDot(w http.ResponseWriter, r *http.Request) error {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return err
	}
	ns, name := p[0], p[1]
	if err := h.authorizeDot(r, "get", eventsSubresource, ns, name); err != nil {
		return err
	}
	u, err := callerOf(r)
	if err != nil {
		return err
	}
	q, err := parseStreamQuery(r)
	if err != nil {
		return err
	}
	d, err := h.getDot(r.Context(), ns, name)
	if err != nil {
		return err
	}
	access := h.newStreamAccess(u, name)
	access.remember(ns, true)
	return h.serveStream(w, r, streamScope{dotUID: string(d.UID), query: q, visible: func(ctx context.Context, f *frame) (bool, error) {
		if !access.allowed(ctx, ns) {
			return false, errAccessRevoked
		}
		return true, nil
	}, stillValid: func(ctx context.Context) error {
		return access.stillValid(ctx, ns)
	}})
}

// parseStreamQuery reads ?after= and ?types=, and the Last-Event-ID header,
// which wins over ?after= (a browser's EventSource reconnects to the same
// URL with the header).
func parseStreamQuery(r *http.Request) (wire.StreamQuery, error) {
	var q wire.StreamQuery
	for key, vals := range r.URL.Query() {
		if len(vals) != 1 {
			return q, badRequest("%s is given %d times; give it once (types takes a comma-separated list)", key, len(vals))
		}
		switch key {
		case "after":
			n, err := eventID(key, vals[0])
			if err != nil {
				return q, err
			}
			q.After = &n
		case "types":
			types, err := eventTypes(vals[0])
			if err != nil {
				return q, err
			}
			q.Types = types
		default:
			return q, badRequest("unknown query parameter %q (the parameters are after and types)", key)
		}
	}
	if v := r.Header.Get(wire.LastEventIDHeader); v != "" {
		n, err := eventID(wire.LastEventIDHeader, v)
		if err != nil {
			return q, err
		}
		q.After = &n
	}
	return q, nil
}

// streamScope is what one stream sends.
type streamScope struct {
	// dotUID is the Dot of a Dot's stream, "" for every Dot.
	dotUID string
	query  wire.StreamQuery
	// visible says whether the caller gets the event; an error ends the
	// stream.
	visible func(ctx context.Context, f *frame) (bool, error)
	// stillValid is asked at every keep-alive; an error ends the stream
	// (a credential revoked since it opened). Nil asks nothing.
	stillValid func(ctx context.Context) error
}

// serveStream answers with the stream. Until the answer begins, a failure
// is an error answer; after, the stream ends and the log says why.
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request, sc streamScope) error {
	if h.feed == nil {
		return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not follow the event log live: read a Dot's events route instead")
	}
	if !h.feed.available() {
		return apiErrorf(http.StatusServiceUnavailable, wire.CodeUnavailable, "the server stops; try again")
	}
	ctx := r.Context()
	s := &streamer{h: h, scope: sc, out: w, rc: http.NewResponseController(w)}
	if sc.query.After != nil {
		// A resume replays from the database: while it does not answer
		// (PostgreSQL being started again), say so before the answer
		// begins, so the client tries again rather than reading an empty
		// stream.
		if err := h.store.Ping(ctx); err != nil && ctx.Err() == nil {
			return apiErrorf(http.StatusServiceUnavailable, wire.CodeUnavailable, "the event log's database does not answer yet; try again")
		}
	}
	if sc.query.After == nil {
		// Subscribed before the answer begins: a stream from the end of
		// the log replays nothing, so a refusal can still be an answer.
		sub, err := h.feed.subscribe(ctx, sc.dotUID, sc.query.Types)
		if err != nil {
			if errors.Is(err, errFeedStopped) {
				return apiErrorf(http.StatusServiceUnavailable, wire.CodeUnavailable, "the server stops; try again")
			}
			return nil // the client went
		}
		defer h.feed.unsubscribe(sub)
		s.sub = sub
	}
	w.Header().Set("Content-Type", wire.StreamContentType)
	// Proxies such as nginx would otherwise hold the stream in a buffer.
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The head goes now: a client waits for it before it reads on.
	err := s.flush()
	if err == nil {
		err = s.run(ctx)
	}
	if s.sub != nil && errors.Is(context.Cause(s.sub.ctx), errSlowReader) {
		// Cut off while a write blocked: that write's error says less.
		err = errSlowReader
	}
	switch {
	case err == nil, ctx.Err() != nil, errors.Is(err, errFeedStopped):
	case errors.Is(err, errSlowReader):
		h.log.Info("a client of the live stream did not keep up and was cut off; it resumes with Last-Event-ID",
			"path", r.URL.Path, "after", s.cursor)
	case errors.Is(err, errAccessRevoked):
		h.log.V(1).Info("a stream's caller lost the right to read it; the stream ends", "path", r.URL.Path)
	default:
		var we *writeError
		if errors.As(err, &we) {
			h.log.V(1).Info("a client of the live stream went", "path", r.URL.Path, "err", err.Error())
		} else {
			h.log.Error(err, "a live stream failed", "path", r.URL.Path)
		}
	}
	// The answer began: nothing more can be said but the end of the stream.
	return nil
}

// streamer writes one stream: the replay from the database after the
// client's id, then the feed's events, with nothing lost or repeated.
type streamer struct {
	h     *Handler
	scope streamScope
	out   io.Writer
	rc    *http.ResponseController
	sub   *subscription
	// cursor is the id the stream stands at: every event the client
	// wants up to it was sent. told is the last id the client was sent.
	cursor, told int64
}

// writeError is a failed write to the client (it went, or was cut off).
type writeError struct{ err error }

func (e *writeError) Error() string { return "write the stream: " + e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

func (s *streamer) run(ctx context.Context) error {
	if s.sub != nil {
		// From the end of the log: where the feed stood when subscribed.
		s.cursor = s.sub.position()
		if err := s.tell(); err != nil {
			return err
		}
	} else {
		// Replay, then subscribe, then replay again from there: the first
		// replay may be long and takes no place in the feed's queue; the
		// second covers what the feed handed on before subscribing, and
		// the queue what comes after (ids at or below the cursor are
		// skipped).
		s.cursor = *s.scope.query.After
		s.told = s.cursor
		if err := s.replay(ctx); err != nil {
			return err
		}
		sub, err := s.h.feed.subscribe(ctx, s.scope.dotUID, s.scope.query.Types)
		if err != nil {
			return err
		}
		defer s.h.feed.unsubscribe(sub)
		s.sub = sub
		if err := s.replay(ctx); err != nil {
			return err
		}
	}
	// A stream cut off while its write blocks on a client that does not
	// read is unblocked by a write deadline in the past. The deadline is
	// not set once run has returned: the ResponseController is the
	// handler's alone then.
	var mu sync.Mutex
	running := true
	stop := context.AfterFunc(s.sub.ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if running && errors.Is(context.Cause(s.sub.ctx), errSlowReader) {
			if err := s.rc.SetWriteDeadline(time.Now()); err != nil {
				// The stream still ends, once its write returns.
				s.h.log.Error(err, "cannot cut off a live stream's blocked write")
			}
		}
	})
	defer func() {
		stop()
		mu.Lock()
		running = false
		mu.Unlock()
	}()
	return s.live()
}

// replay sends the events after the cursor from the database, page by
// page, until a page is short: the stream has caught up with the table.
func (s *streamer) replay(ctx context.Context) error {
	for {
		events, err := s.h.store.EventsSince(ctx, store.TailQuery{
			After: s.cursor, DotUID: s.scope.dotUID, Types: s.scope.query.Types, Limit: replayPage,
		})
		if err != nil {
			return err
		}
		for _, e := range events {
			if err := s.send(ctx, newFrame(e, s.h.log)); err != nil {
				return err
			}
		}
		if len(events) > 0 {
			if err := s.flush(); err != nil {
				return err
			}
		}
		if len(events) < replayPage {
			return nil
		}
	}
}

// live sends the feed's events as they come, and a keep-alive comment
// every keepAlive, until the subscription ends.
func (s *streamer) live() error {
	keepAlive := time.NewTicker(s.h.keepAlive)
	defer keepAlive.Stop()
	ctx := s.sub.ctx
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-s.sub.wake:
			if err := s.drain(ctx); err != nil {
				return err
			}
		case <-keepAlive.C:
			if s.scope.stillValid != nil {
				if err := s.scope.stillValid(ctx); err != nil {
					return err
				}
			}
			if err := s.drain(ctx); err != nil {
				return err
			}
			if s.cursor > s.told {
				// Events the client does not get went by: its resume
				// point moves past them.
				if err := s.tell(); err != nil {
					return err
				}
			}
			if err := s.write([]byte(": keep-alive\n\n")); err != nil {
				return err
			}
		}
		if err := s.flush(); err != nil {
			return err
		}
	}
}

// drain sends what the subscription's queue holds, and moves the cursor to
// the feed's position as of it.
func (s *streamer) drain(ctx context.Context) error {
	frames, pos := s.sub.take()
	for _, f := range frames {
		if err := s.send(ctx, f); err != nil {
			return err
		}
	}
	s.cursor = max(s.cursor, pos)
	return nil
}

// send writes f if the stream is not past it and the caller may see it,
// and moves the cursor past it.
func (s *streamer) send(ctx context.Context, f *frame) error {
	if f.id <= s.cursor {
		return nil
	}
	ok, err := s.scope.visible(ctx, f)
	if err != nil {
		return err
	}
	if ok {
		if err := s.write(f.sse); err != nil {
			return err
		}
		s.told = f.id
	}
	s.cursor = f.id
	return nil
}

// tell sends the cursor as an id without data: the client's resume point
// moves there, and no event is fired.
func (s *streamer) tell() error {
	s.told = s.cursor
	if err := s.write([]byte("id: " + strconv.FormatInt(s.cursor, 10) + "\n\n")); err != nil {
		return err
	}
	return s.flush()
}

func (s *streamer) write(b []byte) error {
	if _, err := s.out.Write(b); err != nil {
		return &writeError{err}
	}
	return nil
}

func (s *streamer) flush() error {
	if err := s.rc.Flush(); err != nil {
		return &writeError{err}
	}
	return nil
}
