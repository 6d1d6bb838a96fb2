// Package door holds what the guest's servers (dot-agentd's two doors and the
// engine's socket) share to stay up under abuse. Limit caps the connections a guest server holds open. At the
// cap a new connection does not wait behind the ones already held: the
// oldest connection that is not serving a trusted request (one that sent
// nothing yet, one idle between requests, one whose request was not
// authenticated) is closed to make room. A neighbour opening connections
// and sending nothing therefore never keeps the host's own requests out.
package door

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener is a net.Listener holding at most max connections open.
type Listener struct {
	net.Listener
	max int

	mu    sync.Mutex
	room  *sync.Cond
	seq   uint64
	conns map[*conn]struct{}
}

// Limit wraps l; max below 1 is 1.
func Limit(l net.Listener, max int) *Listener {
	if max < 1 {
		max = 1
	}
	ln := &Listener{Listener: l, max: max, conns: map[*conn]struct{}{}}
	ln.room = sync.NewCond(&ln.mu)
	return ln
}

// conn is one connection held: its age, its HTTP state and whether the
// request it serves was trusted.
type conn struct {
	net.Conn
	l       *Listener
	seq     uint64
	active  bool
	trusted bool
	once    sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.room.Signal()
		c.l.mu.Unlock()
	})
	return err
}

// Accept returns the next connection, making room for it first.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	for len(l.conns) >= l.max {
		if victim := l.oldestEvictable(); victim != nil {
			delete(l.conns, victim)
			victim.once.Do(func() {})
			// Closing the socket ends the server's read on it; the server
			// then calls Close, which finds the entry gone.
			_ = victim.Conn.Close()
			continue
		}
		l.room.Wait()
	}
	l.seq++
	c := &conn{Conn: nc, l: l, seq: l.seq}
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

func (l *Listener) oldestEvictable() *conn {
	var victim *conn
	for c := range l.conns {
		if c.active && c.trusted {
			continue
		}
		if victim == nil || c.seq < victim.seq {
			victim = c
		}
	}
	return victim
}

// Len is the number of connections held.
func (l *Listener) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

type ctxKey struct{}

// Configure sets srv's ConnState and ConnContext hooks so the listener knows
// which connections serve a request; call it before srv.Serve(l).
func (l *Listener) Configure(srv *http.Server) {
	prevState, prevCtx := srv.ConnState, srv.ConnContext
	srv.ConnState = func(nc net.Conn, s http.ConnState) {
		if c, ok := nc.(*conn); ok && c.l == l {
			l.mu.Lock()
			c.active = s == http.StateActive || s == http.StateHijacked
			if s == http.StateIdle {
				c.trusted = false
			}
			l.mu.Unlock()
		}
		if prevState != nil {
			prevState(nc, s)
		}
	}
	srv.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, nc)
		}
		if c, ok := nc.(*conn); ok && c.l == l {
			ctx = context.WithValue(ctx, ctxKey{}, c)
		}
		return ctx
	}
}

// Trust marks the connection serving ctx's request as doing trusted work
// (authenticated, or from a trusted door): it is not closed to make room
// until the request ends.
func Trust(ctx context.Context) {
	c, ok := ctx.Value(ctxKey{}).(*conn)
	if !ok {
		return
	}
	c.l.mu.Lock()
	c.trusted = true
	c.l.mu.Unlock()
}

// Trusting wraps h so that every request it serves is trusted (a door whose
// connections were checked on accept).
func Trusting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Trust(r.Context())
		h.ServeHTTP(w, r)
	})
}

// ReadBounded gives each request d to arrive whole: the read deadline is set
// when the handler starts and cleared once the body has been read to its end
// (at once for a request without a body), so the time the work takes after
// that (a long command, an event stream) is not bounded by it. A handler may
// move the deadline further with http.ResponseController (an upload).
func ReadBounded(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			_ = rc.SetReadDeadline(time.Now().Add(d))
			r.Body = &clearOnEOF{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		}
		h.ServeHTTP(w, r)
	})
}

type clearOnEOF struct {
	io.ReadCloser
	clear func()
	once  sync.Once
}

func (b *clearOnEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.clear)
	}
	return n, err
}

// NetConn is the connection accepted, under the listener's bookkeeping (for
// reading its peer's credentials).
func (c *conn) NetConn() net.Conn { return c.Conn }
