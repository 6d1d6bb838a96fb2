// Package door holds what the guest's servers (dot-agentd's two doors and
// the engine's socket) share to stay up under abuse: a listener holding a
// bounded number of connections (Limit), read bounds for a request's body
// (ReadBounded) and the methods a path is served with (Allowed).
//
// At its cap Limit does not make a new connection wait behind the ones held:
// the oldest connection not doing trusted work (one that sent nothing yet,
// one whose request was not authenticated, one idle that never showed a
// credential) is closed to make room, once it had MinAge to send its head.
// A neighbour opening connections and sending nothing therefore never keeps
// the host out, and the host's own authenticated connection is never closed
// for a neighbour's.
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
	born    time.Time
	active  bool
	trusted bool
	// kept: the connection showed a credential (Trust), so it stays
	// trusted while idle between requests: the host's pooled connection
	// is never closed to make room for a neighbour's.
	kept bool
	once sync.Once
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

// MinAge is how long a connection is left to send its request's head before
// it may be closed to make room: at the cap, the listener waits for the
// oldest closable connection to reach it rather than close one younger. It
// bounds how fast a flood turns the connections over (Limit's max per
// MinAge), so a connection that does send its head at once (the host's) is
// read before it could be closed.
const MinAge = 100 * time.Millisecond

// Accept returns the next connection, making room for it first.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	for len(l.conns) >= l.max {
		victim := l.oldestEvictable()
		if victim == nil {
			l.room.Wait()
			continue
		}
		if wait := MinAge - time.Since(victim.born); wait > 0 {
			l.mu.Unlock()
			time.Sleep(wait)
			l.mu.Lock()
			continue
		}
		delete(l.conns, victim)
		victim.once.Do(func() {})
		// Closing the socket ends the server's read on it; the server then
		// calls Close, which finds the entry gone.
		_ = victim.Conn.Close()
	}
	l.seq++
	c := &conn{Conn: nc, l: l, seq: l.seq, born: time.Now()}
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

func (l *Listener) oldestEvictable() *conn {
	var victim *conn
	for c := range l.conns {
		if c.trusted && (c.active || c.kept) {
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
			if s == http.StateIdle && !c.kept {
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

// Trust marks the connection serving ctx's request as authenticated: it is
// not closed to make room while it lives (idle between requests included;
// the idle timeout still ends it).
func Trust(ctx context.Context) { mark(ctx, true) }

func mark(ctx context.Context, keep bool) {
	c, ok := ctx.Value(ctxKey{}).(*conn)
	if !ok {
		return
	}
	c.l.mu.Lock()
	c.trusted = true
	c.kept = c.kept || keep
	c.l.mu.Unlock()
}

// Trusting wraps h so that every request it serves is trusted until it
// ends (a door whose connections were checked on accept, with no
// credential to tell one from another).
func Trusting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mark(r.Context(), false)
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
