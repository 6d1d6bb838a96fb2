// Package fakeguest is a fake guest, for tests only: a stand-in for
// dot-agentd and the engine that answers guestclient's calls in the guest
// protocol, so the host agent's packages meet the guest at the edge of their
// tests without a VM. It sits beside the client whose protocol it speaks and
// serves the guest link's pushes, the event pump's stream, the deliverer's
// sends, and the files, screen, tools and skills the Dots API reads through
// the agent: GuestFns, a fake built from one function per route; Stream, a
// guest's outbox as the engine streams it; and Engine, an in-memory engine
// with a home of files that remembers what was pushed to and sent to each
// guest. Nothing here opens a connection.
package fakeguest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
)

// GuestFns answers the engine's routes with one function each. A nil
// function takes the push, or answers a ready engine that holds a key. What
// the functions receive went through JSON, as on the wire.
type GuestFns struct {
	SecretsFn func(ctx context.Context, t guestclient.Target, req protocol.SecretsRequest) error
	ConfigFn  func(ctx context.Context, t guestclient.Target, c protocol.RuntimeConfig) error
	HealthFn  func(ctx context.Context, t guestclient.Target) (protocol.Health, error)
	// EventsFn takes POST /events; nil accepts every event.
	EventsFn func(ctx context.Context, t guestclient.Target, ev protocol.InboundEvent) error
	// StreamFn answers GET /events/stream?after= with the stream's body;
	// nil serves a stream that never sends an event.
	StreamFn func(ctx context.Context, t guestclient.Target, after int64) (io.ReadCloser, error)
	// AgentdFns answers the routes the Dots API reads a guest with.
	AgentdFns
}

// ReadyHealth is the health of an engine that is ready.
func ReadyHealth() protocol.Health {
	return protocol.Health{Status: protocol.HealthOK, State: protocol.AgentState("IDLE"), OpenRouterConfigured: true,
		Checks: []protocol.HealthCheck{{Name: "database", OK: true}}}
}

// Agent implements guestlink.Guest.
func (f GuestFns) Agent(ctx context.Context, t guestclient.Target, method, sub string, in, out any) error {
	route := "/" + strings.TrimLeft(sub, "/")
	switch {
	case method == http.MethodPost && route == protocol.RouteSecrets:
		var req protocol.SecretsRequest
		if err := roundTrip(in, &req); err != nil {
			return err
		}
		if f.SecretsFn == nil {
			return nil
		}
		return f.SecretsFn(ctx, t, req)
	case method == http.MethodPut && route == protocol.RouteConfig:
		var c protocol.RuntimeConfig
		if err := roundTrip(in, &c); err != nil {
			return err
		}
		if f.ConfigFn == nil {
			return nil
		}
		return f.ConfigFn(ctx, t, c)
	case method == http.MethodGet && route == protocol.RouteHealth:
		h := ReadyHealth()
		if f.HealthFn != nil {
			var err error
			if h, err = f.HealthFn(ctx, t); err != nil {
				return err
			}
		}
		return roundTrip(h, out)
	case method == http.MethodPost && route == protocol.RouteEvents:
		var ev protocol.InboundEvent
		if err := roundTrip(in, &ev); err != nil {
			return err
		}
		if f.EventsFn != nil {
			if err := f.EventsFn(ctx, t, ev); err != nil {
				return err
			}
		}
		return roundTrip(protocol.Accepted{Accepted: true}, out)
	}
	return &guestclient.StatusError{Method: method, Path: protocol.AgentRoutePrefix + route, Status: http.StatusNotFound, Code: "not_found"}
}

// Request answers the raw requests of the host agent: the event stream
// (GET /v1/agent/events/stream?after=), as the event pump asks it, and the
// routes the Dots API reads a guest with through the agent (files, the
// screen, the engine's tools and skills).
func (f GuestFns) Request(ctx context.Context, t guestclient.Target, method, pathAndQuery string, _ io.Reader, _ http.Header) (*http.Response, error) {
	u, err := url.Parse(pathAndQuery)
	if err != nil {
		return nil, fmt.Errorf("fake guest: %w", err)
	}
	if resp, ok := f.agentd(ctx, t, method, u); ok {
		return resp, nil
	}
	if method != http.MethodGet || u.Path != protocol.AgentRoutePrefix+protocol.RouteEventsStream {
		return answer(http.StatusNotFound, io.NopCloser(strings.NewReader(`{"error":"not_found","message":"no route"}`))), nil
	}
	var after int64
	if raw := u.Query().Get(protocol.StreamAfterQuery); raw != "" {
		if after, err = strconv.ParseInt(raw, 10, 64); err != nil || after < 0 {
			return answer(http.StatusBadRequest, io.NopCloser(strings.NewReader(`{"error":"invalid","message":"after must be a seq"}`))), nil
		}
	}
	body := io.ReadCloser(nil)
	if f.StreamFn == nil {
		body = NewStream().Open(ctx, after)
	} else if body, err = f.StreamFn(ctx, t, after); err != nil {
		return nil, err
	}
	resp := answer(http.StatusOK, body)
	resp.Header.Set("Content-Type", "text/event-stream")
	return resp, nil
}

func answer(status int, body io.ReadCloser) *http.Response {
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: http.Header{}, Body: body}
}

func roundTrip(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("fake guest: encode: %w", err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("fake guest: decode: %w", err)
	}
	return nil
}

// Engine is an in-memory engine per guest (by port and pid): it holds the
// key and the configuration it was given, refuses a push that breaks the
// protocol's rules as the real engine does, and is ready once it holds a
// key. Safe for concurrent use.
type Engine struct {
	mu     sync.Mutex
	guests map[[2]int]*engineState
	// Starting, when true, makes every engine answer that it is starting.
	starting bool
	// reply is what an engine does with an event it accepted; refuse says
	// which events it refuses (400 invalid).
	reply  func(ev protocol.InboundEvent) []protocol.OutboundEvent
	refuse func(ev protocol.InboundEvent) bool
}

type engineState struct {
	key     string
	config  *protocol.RuntimeConfig
	secrets int
	configs int
	// stream is the guest's outbox; inbound the events it accepted, each
	// id once, in order.
	stream  *Stream
	inbound []protocol.InboundEvent
	seen    map[string]bool
	// files is the guest's home (WriteFile); mcpSecrets what the last
	// push of secrets carried.
	files      map[string][]byte
	mcpSecrets map[string]map[string]string
}

// NewEngine returns an engine with no guest yet.
func NewEngine() *Engine { return &Engine{guests: map[[2]int]*engineState{}} }

func (e *Engine) state(t guestclient.Target) *engineState {
	k := [2]int{t.Port, t.PID}
	s, ok := e.guests[k]
	if !ok {
		s = &engineState{stream: NewStream(), seen: map[string]bool{}}
		e.guests[k] = s
	}
	return s
}

// SetReply sets what every engine does with an inbound event it accepts
// (once per id, as the real engine): the events it then writes to its
// outbox, whose seq, id and ts the stream gives.
func (e *Engine) SetReply(fn func(ev protocol.InboundEvent) []protocol.OutboundEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reply = fn
}

// SetRefuse sets which inbound events every engine refuses, as the real
// one refuses an event it cannot take (400 invalid).
func (e *Engine) SetRefuse(fn func(ev protocol.InboundEvent) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.refuse = fn
}

// Stream is the outbox of the guest on port and pid.
func (e *Engine) Stream(port, pid int) *Stream {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state(guestclient.Target{Port: port, PID: pid}).stream
}

// Inbound is what the guest on port and pid accepted, each id once, in
// order.
func (e *Engine) Inbound(port, pid int) []protocol.InboundEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]protocol.InboundEvent(nil), e.state(guestclient.Target{Port: port, PID: pid}).inbound...)
}

// Guest returns the fake guest that talks to this engine.
func (e *Engine) Guest() GuestFns {
	return GuestFns{
		SecretsFn: func(_ context.Context, t guestclient.Target, req protocol.SecretsRequest) error {
			if err := req.Validate(); err != nil {
				return &guestclient.StatusError{Method: http.MethodPost, Path: protocol.AgentRoutePrefix + protocol.RouteSecrets,
					Status: http.StatusBadRequest, Code: protocol.ErrInvalidSecret, Message: err.Error()}
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			s := e.state(t)
			s.key = req.OpenRouterAPIKey
			s.mcpSecrets = req.MCPSecrets
			s.secrets++
			return nil
		},
		ConfigFn: func(_ context.Context, t guestclient.Target, c protocol.RuntimeConfig) error {
			if err := c.Validate(); err != nil {
				return &guestclient.StatusError{Method: http.MethodPut, Path: protocol.AgentRoutePrefix + protocol.RouteConfig,
					Status: http.StatusBadRequest, Code: protocol.ErrInvalidConfig, Message: err.Error()}
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			s := e.state(t)
			s.config = &c
			s.configs++
			return nil
		},
		HealthFn: func(_ context.Context, t guestclient.Target) (protocol.Health, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			s := e.state(t)
			h := ReadyHealth()
			h.OpenRouterConfigured = s.key != ""
			if e.starting || s.config == nil {
				h.Status = protocol.HealthStarting
			}
			return h, nil
		},
		EventsFn: func(_ context.Context, t guestclient.Target, ev protocol.InboundEvent) error {
			e.mu.Lock()
			refuse := e.refuse
			e.mu.Unlock()
			if _, err := protocol.ParseInbound(ev); err != nil || (refuse != nil && refuse(ev)) {
				return &guestclient.StatusError{Method: http.MethodPost, Path: protocol.AgentRoutePrefix + protocol.RouteEvents,
					Status: http.StatusBadRequest, Code: protocol.ErrInvalid, Message: "the engine refuses it"}
			}
			e.mu.Lock()
			s := e.state(t)
			if s.seen[ev.ID] {
				e.mu.Unlock()
				return nil
			}
			s.seen[ev.ID] = true
			s.inbound = append(s.inbound, ev)
			reply, stream := e.reply, s.stream
			e.mu.Unlock()
			if reply != nil {
				stream.Append(reply(ev)...)
			}
			return nil
		},
		StreamFn: func(ctx context.Context, t guestclient.Target, after int64) (io.ReadCloser, error) {
			e.mu.Lock()
			stream := e.state(t).stream
			e.mu.Unlock()
			return stream.Open(ctx, after), nil
		},
		AgentdFns: AgentdFns{
			ReadFn: func(_ context.Context, t guestclient.Target, p string) ([]byte, error) { return e.readFile(t, p) },
			ListFn: func(_ context.Context, t guestclient.Target, p string) (protocol.ListResponse, error) {
				return e.listFiles(t, p)
			},
			ToolsFn: func(_ context.Context, t guestclient.Target) (protocol.Tools, error) { return e.tools(t), nil },
		},
	}
}

// SetStarting makes every engine answer that it is starting (or stop).
func (e *Engine) SetStarting(v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.starting = v
}

// Restart forgets what a guest was given, as an engine process that
// restarted inside its VM (it keeps its configuration: the real one persists
// it; the key lives in memory only).
func (e *Engine) Restart(t guestclient.Target) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state(t).key = ""
}

// Pushed is what a guest was given: its key, its configuration (nil when
// none), and how many pushes of each it took.
type Pushed struct {
	Key              string
	Config           *protocol.RuntimeConfig
	Secrets, Configs int
}

// Pushed returns what the guest on port and pid holds.
func (e *Engine) Pushed(port, pid int) Pushed {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.guests[[2]int{port, pid}]
	if !ok {
		return Pushed{}
	}
	return Pushed{Key: s.key, Config: s.config, Secrets: s.secrets, Configs: s.configs}
}
