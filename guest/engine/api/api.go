// Package api serves the engine's routes of ref 5.3 on its unix socket:
// health, secrets, config, inbound events, the outbound event stream (SSE
// from the outbox), state, tools, skills and prepare-sleep. It logs a
// request's method, path and status, never a body.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/door"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// SkillLister lists the Dot's skills (GET /skills).
type SkillLister interface {
	Skills(ctx context.Context) ([]protocol.Skill, error)
}

// Browsers are the Dot's browser identities (browser.Manager): the routes
// and the model's tools share them, so their limits hold for both (ref 5.3).
type Browsers interface {
	List(ctx context.Context) ([]protocol.BrowserIdentity, error)
	Get(ctx context.Context, id string) (protocol.BrowserIdentity, error)
	Create(ctx context.Context, name string, proxy *string) (protocol.BrowserIdentity, error)
	Delete(ctx context.Context, id string) error
	Close(ctx context.Context, id string) error
	Frame(ctx context.Context, id string) ([]byte, error)
	Counts(ctx context.Context) protocol.BrowserCounts
}

// Checker is one of the health checks.
type Checker func(ctx context.Context) protocol.HealthCheck

// Server is the engine's API.
type Server struct {
	Engine    *work.Engine
	Store     *store.Store
	Skills    SkillLister
	Browsers  Browsers
	Checks    []Checker
	Log       *slog.Logger
	KeepAlive time.Duration // default 15 s
	// StopTimeout bounds prepare-sleep's wait for the turns (the host gives
	// 60 s in all).
	StopTimeout time.Duration
}

const maxBody = 4 << 20

// The socket's bounds: a request's head, its body, a kept-alive connection
// with no request, and the connections held open (at the cap the oldest one
// not serving a request is closed, door.Limit).
const (
	HeaderTimeout = 5 * time.Second
	BodyTimeout   = 30 * time.Second
	IdleTimeout   = 30 * time.Second
	MaxConns      = 64
)

// Handler returns the routes.
func (s *Server) Handler() http.Handler {
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.KeepAlive == 0 {
		s.KeepAlive = protocol.KeepAliveSeconds * time.Second
	}
	if s.StopTimeout == 0 {
		s.StopTimeout = 55 * time.Second
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.RouteHealth, s.health)
	mux.HandleFunc("POST "+protocol.RouteSecrets, s.secrets)
	mux.HandleFunc("PUT "+protocol.RouteConfig, s.config)
	mux.HandleFunc("POST "+protocol.RouteEvents, s.events)
	mux.HandleFunc("GET "+protocol.RouteEventsStream, s.stream)
	mux.HandleFunc("GET "+protocol.RouteState, s.state)
	mux.HandleFunc("GET "+protocol.RouteTools, s.tools)
	mux.HandleFunc("GET "+protocol.RouteSkills, s.skills)
	mux.HandleFunc("POST "+protocol.RoutePrepareSleep, s.prepareSleep)
	if s.Browsers != nil {
		idPath := protocol.RouteBrowserIdents + "/{id}"
		mux.HandleFunc("GET "+protocol.RouteBrowserIdents, s.browserList)
		mux.HandleFunc("POST "+protocol.RouteBrowserIdents, s.browserCreate)
		mux.HandleFunc("GET "+idPath, s.browserGet)
		mux.HandleFunc("DELETE "+idPath, s.browserDelete)
		mux.HandleFunc("GET "+idPath+protocol.BrowserIdentityFrame, s.browserFrame)
		mux.HandleFunc("POST "+idPath+protocol.BrowserIdentityClose, s.browserClose)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := door.Allowed(mux, r, "/"); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, protocol.ErrMethodNotAllowed, fmt.Sprintf("%s is served with %s, not %s", r.URL.Path, strings.Join(allow, ", "), r.Method))
			return
		}
		writeError(w, protocol.ErrNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	// Every connection passed the peer check on accept (Listen).
	return s.logged(door.Trusting(door.ReadBounded(mux, BodyTimeout)))
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		s.Log.Info("request", "method", r.Method, "path", r.URL.Path, "status", sw.status)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code, message string) {
	writeJSON(w, protocol.ErrorStatus(code), protocol.ErrorBody{Error: code, Message: message})
}

// decodeBody reads one JSON value of at most maxBody bytes into v
// (protocol.DecodeJSON) and answers a body it refuses with the route's code
// (invalid_secret, invalid_config, invalid): false means answered.
func decodeBody(w http.ResponseWriter, r *http.Request, code string, v any) bool {
	if err := protocol.DecodeJSON(r.Body, maxBody, v); err != nil {
		writeError(w, code, err.Error())
		return false
	}
	return true
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	st, err := s.Engine.State(r.Context())
	status := protocol.HealthOK
	if err != nil || !s.Engine.Started() {
		status = protocol.HealthStarting
	}
	checks := []protocol.HealthCheck{}
	for _, c := range s.Checks {
		checks = append(checks, c(r.Context()))
	}
	writeJSON(w, http.StatusOK, protocol.Health{
		Status: status, State: st.State, OpenRouterConfigured: s.Engine.KeyConfigured(),
		Browser: s.browserCounts(r.Context()), Checks: checks,
	})
}

func (s *Server) browserCounts(ctx context.Context) protocol.BrowserCounts {
	if s.Browsers == nil {
		return protocol.BrowserCounts{}
	}
	return s.Browsers.Counts(ctx)
}

func (s *Server) secrets(w http.ResponseWriter, r *http.Request) {
	// DecodeJSON's messages never quote the body, which holds the secrets.
	var req protocol.SecretsRequest
	if !decodeBody(w, r, protocol.ErrInvalidSecret, &req) {
		return
	}
	if err := s.Engine.SetSecrets(req); err != nil {
		writeError(w, protocol.ErrInvalidSecret, trimInvalid(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) config(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if !decodeBody(w, r, protocol.ErrInvalidConfig, &body) {
		return
	}
	if err := s.Engine.PutConfig(r.Context(), body); err != nil {
		if errors.Is(err, work.ErrInvalid) {
			writeError(w, protocol.ErrInvalidConfig, trimInvalid(err))
			return
		}
		writeError(w, protocol.ErrInternal, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func trimInvalid(err error) string {
	msg := err.Error()
	prefix := work.ErrInvalid.Error() + ": "
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	var ev protocol.InboundEvent
	if !decodeBody(w, r, protocol.ErrInvalid, &ev) {
		return
	}
	if err := s.Engine.Accept(r.Context(), ev); err != nil {
		if errors.Is(err, work.ErrInvalid) {
			writeError(w, protocol.ErrInvalid, trimInvalid(err))
			return
		}
		writeError(w, protocol.ErrInternal, err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, protocol.Accepted{Accepted: true})
}

// stream replays the outbox after ?after= (or Last-Event-ID) and then sends
// each row once as its transaction commits, with a keep-alive comment every
// KeepAlive; it never polls (ref 5.3).
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	after := int64(0)
	raw := r.URL.Query().Get(protocol.StreamAfterQuery)
	if raw == "" {
		raw = r.Header.Get(protocol.StreamLastEventID)
	}
	if raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 || n >= store.MaxCursor {
			writeError(w, protocol.ErrInvalid, "after must be a seq: a whole number of 0 or more, under 2^53")
			return
		}
		after = n
	}
	// The cursor rule: a cursor beyond the outbox's end is the host's record
	// of a database this guest lost. The outbox moves on past it with a
	// guest.outbox.reset, which the stream then sends first.
	moved, err := s.Store.CatchUp(r.Context(), after)
	if err != nil {
		writeError(w, protocol.ErrInternal, err.Error())
		return
	}
	if moved {
		s.Log.Warn("the host's cursor is beyond the outbox: the outbox moved on to it", "cursor", after)
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, protocol.ErrInternal, "the connection cannot stream")
		return
	}
	// Subscribe before the first read, so a commit between the read and the
	// wait is not missed.
	wake, cancel := s.Store.Subscribe()
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	keep := time.NewTicker(s.KeepAlive)
	defer keep.Stop()
	ctx := r.Context()
	for {
		for {
			evs, err := s.Store.EventsAfter(ctx, after, 500)
			if err != nil {
				if ctx.Err() == nil {
					s.Log.Error("read outbox for the stream", "err", err)
				}
				return
			}
			for _, ev := range evs {
				data, err := json.Marshal(ev)
				if err != nil {
					s.Log.Error("encode outbound event", "seq", ev.Seq, "err", err)
					return
				}
				if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", ev.Seq, data); err != nil {
					return
				}
				after = ev.Seq
			}
			if len(evs) > 0 {
				flusher.Flush()
			}
			if len(evs) < 500 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-keep.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

func (s *Server) state(w http.ResponseWriter, r *http.Request) {
	st, err := s.Engine.State(r.Context())
	if err != nil {
		writeError(w, protocol.ErrInternal, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) tools(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Engine.ToolsInfo())
}

func (s *Server) skills(w http.ResponseWriter, r *http.Request) {
	out := protocol.Skills{Skills: []protocol.Skill{}}
	if s.Skills != nil {
		list, err := s.Skills.Skills(r.Context())
		if err != nil {
			writeError(w, protocol.ErrInternal, err.Error())
			return
		}
		out.Skills = append(out.Skills, list...)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) prepareSleep(w http.ResponseWriter, r *http.Request) {
	// Answered to its end even when the host hangs up (ref 8.8).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.StopTimeout)
	defer cancel()
	if err := s.Engine.Stop(ctx, true); err != nil {
		writeError(w, protocol.ErrInternal, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Listen removes a socket file left by a crash, listens on path with mode
// 0660, and refuses connections from modelUID (SO_PEERCRED, ref 4.1). It
// holds at most MaxConns connections open (door.Limit): give the server to
// Configure before serving.
func Listen(path string, modelUID int) (*Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket: remove it or name another path", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("set mode of %s: %w", path, err)
	}
	return &Listener{Listener: door.Limit(l, MaxConns), refused: modelUID, refusing: make(chan struct{}, maxRefusing)}, nil
}

// maxRefusing bounds the refusals written at once; past it a refused
// connection is closed without an answer.
const maxRefusing = 16

// Listener is the engine's socket. It refuses a connection from the model's
// user: the peer check is made on accept, and the refusal (which waits for
// the request's head, up to a second) is written on a goroutine of its own,
// so a connection of the model's user never delays the next one.
type Listener struct {
	*door.Listener
	refused  int
	refusing chan struct{}
}

// NewServer is the engine's HTTP server over l, with the socket's bounds.
func (l *Listener) NewServer(h http.Handler) *http.Server {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: HeaderTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: 64 << 10}
	l.Configure(hs)
	return hs
}

func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uid, err := peerUID(c); err == nil && uid != l.refused {
			return c, nil
		}
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				refuse(c)
			}()
		default:
			c.Close()
		}
	}
}

// refuse says why in HTTP, then closes: the model's processes get nothing.
// The request's head is read first, so the client is not cut while it still
// writes and does read the answer.
func refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	drainHead(c)
	body := `{"error":"forbidden","message":"the model's user may not use the engine's API"}`
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

func drainHead(c net.Conn) {
	buf := make([]byte, 4096)
	var seen []byte
	for len(seen) < 64<<10 {
		n, err := c.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil || bytes.Contains(seen, []byte("\r\n\r\n")) {
			return
		}
	}
}

func peerUID(c net.Conn) (int, error) {
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid := -1
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		if err != nil {
			cerr = err
			return
		}
		uid = int(cred.Uid)
	})
	if err != nil {
		return -1, err
	}
	return uid, cerr
}
