// Package guestclient is the host's client of dot-agentd through a VM's port
// forward (ref 5.1). A port is not a credential: after a QEMU died or the host
// restarted, any local process may listen on a port the host still has on
// record. So the token never goes to a listener that has not proven it holds
// the token: every TCP connection this client opens asks GET /v1/proof with a
// fresh nonce first, on that very connection, and is handed to the HTTP
// transport only when the answer is HMAC-SHA256(token, prefix + nonce). A
// proven connection is kept alive and reused for the same target, so the
// proof is asked once per connection, not once per call. A listener that
// cannot prove fails the call with ErrGuestUnproven, which is not retried.
package guestclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// ErrGuestUnproven: the listener on the guest port did not prove it holds the
// Dot's token. It never saw the token. Not retried: the caller reports it.
var ErrGuestUnproven = errors.New("guest_unproven")

// ErrGuestNotAnswering: the port accepted the connection but closed it
// without any answer to the proof, what QEMU's forward does while nothing
// listens inside the guest yet (a booting guest). The token was not sent.
// Asking again later is how a caller waits for a guest to come up.
var ErrGuestNotAnswering = errors.New("guest not answering")

// Target is one guest: the port QEMU forwards and the pid of that QEMU (from
// qemu.json), and the token. Connections are pooled per target, so a new
// QEMU (another pid) or a new port never reuses a connection proven earlier.
//
// Every new connection is checked against the listener rule (listener.go)
// before the proof: the port's listening socket must be the pid's. A pid
// alone is not an identity (the kernel hands it on): StartTicks and BootID
// (qemu.json's proc_start_ticks and boot id) must match too, and a target
// without them is refused. The host agent builds its targets from the VM's
// record: the driver for its own calls, guestlink.Reconciler for the READY
// pushes, the pump and the deliverer.
type Target struct {
	Port  int
	PID   int
	Token string
	// StartTicks is the QEMU's start time in clock ticks since boot
	// (/proc/<pid>/stat field 22).
	StartTicks uint64
	// BootID is the host's boot id when QEMU was started.
	BootID string
}

// String names the target without its token.
func (t Target) String() string { return fmt.Sprintf("127.0.0.1:%d (pid %d)", t.Port, t.PID) }

type poolKey struct {
	port, pid  int
	startTicks uint64
	bootID     string
	token      [sha256.Size]byte
}

// Client talks to guests. The zero value is not usable; call New.
type Client struct {
	// ProofTimeout bounds the proof exchange on a new connection.
	ProofTimeout time.Duration
	// DialTimeout bounds the TCP connect.
	DialTimeout time.Duration
	// ListenerRule is checked on every new connection before the proof;
	// nil is the listener rule (listener.go). Only a test whose stand-in
	// QEMU is not the process holding the port replaces it.
	ListenerRule func(Target) error

	mu    sync.Mutex
	pools map[poolKey]*http.Client
}

// New returns a client with loopback-sized timeouts.
func New() *Client {
	return &Client{ProofTimeout: 10 * time.Second, DialTimeout: 5 * time.Second, pools: map[poolKey]*http.Client{}}
}

// Forget closes the idle connections to the QEMU of t's port and pid (it
// stopped), whatever token and identity they were proven with: the one who
// forgets a VM (its kill) need not hold its token.
func (c *Client) Forget(t Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, hc := range c.pools {
		if k.port == t.Port && k.pid == t.PID {
			hc.CloseIdleConnections()
			delete(c.pools, k)
		}
	}
}

func keyOf(t Target) poolKey {
	return poolKey{port: t.Port, pid: t.PID, startTicks: t.StartTicks, bootID: t.BootID, token: sha256.Sum256([]byte(t.Token))}
}

func (c *Client) httpClient(t Target) *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := keyOf(t)
	if hc, ok := c.pools[k]; ok {
		return hc
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(t.Port))
	tr := &http.Transport{
		// Only ever the one loopback address of this target, never a proxy
		// from the environment: the token must not leave the host.
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return c.dialProven(ctx, addr, t)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	hc := &http.Client{
		Transport: tr,
		// A guest never redirects; following one could carry the token
		// elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	c.pools[k] = hc
	return hc
}

// dialProven connects, checks the listener rule, and runs the proof
// exchange on the new connection before anything that carries the token is
// written to it. The rule is checked after the connect: the connection sits
// in the queue of the socket that listened then, which the check finds.
func (c *Client) dialProven(ctx context.Context, addr string, t Target) (net.Conn, error) {
	token := t.Token
	d := net.Dialer{Timeout: c.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	rule := c.ListenerRule
	if rule == nil {
		rule = checkListener
	}
	if err := rule(t); err != nil {
		conn.Close()
		return nil, err
	}
	deadline := time.Now().Add(c.ProofTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	br, err := prove(conn, addr, token)
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return &bufferedConn{Conn: conn, r: br}, nil
}

// prove writes GET /v1/proof?nonce= on conn and checks the answer.
func prove(conn net.Conn, addr, token string) (*bufio.Reader, error) {
	raw := make([]byte, protocol.ProofNonceBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("make proof nonce: %w", err)
	}
	nonce := hex.EncodeToString(raw)
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+protocol.PathProof+"?"+protocol.QueryNonce+"="+nonce, nil)
	if err != nil {
		return nil, fmt.Errorf("build proof request: %w", err)
	}
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("%w: %s did not take the proof request: %v", ErrGuestUnproven, addr, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil, fmt.Errorf("%w: %s closed the connection without answering GET %s (the guest is not up yet?)", ErrGuestNotAnswering, addr, protocol.PathProof)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && br.Buffered() == 0 {
			// Not one byte back: QEMU's user network holds a connection
			// open while the guest is not listening yet. Nothing was proven
			// and no token was sent; ask again on a new connection.
			return nil, fmt.Errorf("%w: %s did not answer GET %s in time (the guest is not up yet?)", ErrGuestNotAnswering, addr, protocol.PathProof)
		}
		return nil, fmt.Errorf("%w: %s did not answer GET %s as HTTP: %v", ErrGuestUnproven, addr, protocol.PathProof, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered GET %s with %s", ErrGuestUnproven, addr, protocol.PathProof, resp.Status)
	}
	var p protocol.ProofResponse
	if err := protocol.DecodeJSON(resp.Body, maxProofAnswer, &p); err != nil {
		return nil, fmt.Errorf("%w: the answer of %s to GET %s is refused: %v", ErrGuestUnproven, addr, protocol.PathProof, err)
	}
	if !protocol.ProofMatches(token, nonce, p.Proof) {
		return nil, fmt.Errorf("%w: the listener on %s does not hold this Dot's token (another process may have the port since its QEMU stopped)", ErrGuestUnproven, addr)
	}
	if resp.Close {
		return nil, fmt.Errorf("%w: %s closed the connection after the proof", ErrGuestUnproven, addr)
	}
	return br, nil
}

// bufferedConn reads what the proof's reader already buffered first. After a
// complete response nothing should be buffered, but dropping bytes would
// desynchronise HTTP.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// StatusError is a guest's answer that is not a success.
type StatusError struct {
	Method, Path string
	Status       int
	// Code is protocol.ErrorResponse.Error ("outside_home", ...).
	Code    string
	Message string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("guest answered %s %s with %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Request sends one request with the token on a proven connection and
// returns the raw response; the caller closes its body. pathAndQuery starts
// with "/". Use it for streams and file bytes.
func (c *Client) Request(ctx context.Context, t Target, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error) {
	if t.Port <= 0 || t.Port > 65535 {
		return nil, fmt.Errorf("guest port %d is not a TCP port", t.Port)
	}
	u := &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(t.Port))}
	ref, err := url.Parse(pathAndQuery)
	if err != nil || ref.IsAbs() || ref.Host != "" {
		return nil, fmt.Errorf("guest request path %q is not a plain path", pathAndQuery)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.ResolveReference(ref).String(), body)
	if err != nil {
		return nil, fmt.Errorf("build guest request %s %s: %w", method, ref.Path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+t.Token)
	resp, err := c.httpClient(t).Do(req)
	if err != nil {
		// url.Error quotes the URL, never the header: the token stays out.
		return nil, fmt.Errorf("guest %s: %s %s: %w", t, method, ref.Path, unwrapURL(err))
	}
	return resp, nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// DoJSON sends in (when not nil) as JSON and decodes a 2xx answer into out
// (when not nil). A non-2xx answer is a *StatusError.
func (c *Client) DoJSON(ctx context.Context, t Target, method, pathAndQuery string, in, out any) error {
	var body io.Reader
	header := http.Header{}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s body: %w", method, pathAndQuery, err)
		}
		body = bytes.NewReader(b)
		header.Set("Content-Type", "application/json")
	}
	resp, err := c.Request(ctx, t, method, pathAndQuery, body, header)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		se := &StatusError{Method: method, Path: pathAndQuery, Status: resp.StatusCode}
		// A refusal that is not the protocol's ErrorResponse, exactly, keeps
		// its status and no code: its words are not the guest's to choose.
		var er protocol.ErrorResponse
		if protocol.DecodeJSON(resp.Body, maxErrorAnswer, &er) == nil {
			se.Code, se.Message = er.Error, er.Message
		}
		return se
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswer))
		return nil
	}
	// The whole answer is read (DecodeJSON reads to its end), so the proven
	// connection goes back to the pool instead of being closed (a new one
	// would need a new proof).
	if err := protocol.DecodeJSON(resp.Body, MaxAnswer, out); err != nil {
		return &AnswerError{Method: method, Path: pathAndQuery, Err: err}
	}
	return nil
}

// MaxAnswer bounds a guest's JSON answer to one call: the protocol's
// answers that come through DoJSON (health, system, the engine's state and
// acceptances) are a few KiB.
const MaxAnswer = 1 << 20

const (
	// maxErrorAnswer bounds a guest's refusal (an ErrorResponse).
	maxErrorAnswer = 64 << 10
	// maxProofAnswer bounds the answer to the proof (a ProofResponse: 64
	// hex characters in one field).
	maxProofAnswer = 4096
)

// AnswerError is a guest's 2xx answer the client refuses: not one JSON
// value of the route's shape (a field the protocol does not have, a key in
// another case, more after the value), or over MaxAnswer. A guest is
// untrusted from the host's side, so what it says is read as strictly as
// the guest reads the host. Err is a *protocol.DecodeError; the message
// never quotes the answer.
type AnswerError struct {
	Method, Path string
	Err          error
}

func (e *AnswerError) Error() string {
	return fmt.Sprintf("the guest's answer to %s %s is refused: %v", e.Method, e.Path, e.Err)
}

func (e *AnswerError) Unwrap() error { return e.Err }

// Health asks GET /v1/health.
func (c *Client) Health(ctx context.Context, t Target) (protocol.HealthResponse, error) {
	var h protocol.HealthResponse
	err := c.DoJSON(ctx, t, http.MethodGet, protocol.PathHealth, nil, &h)
	return h, err
}

// System asks GET /v1/system.
func (c *Client) System(ctx context.Context, t Target) (protocol.SystemResponse, error) {
	var s protocol.SystemResponse
	err := c.DoJSON(ctx, t, http.MethodGet, protocol.PathSystem, nil, &s)
	return s, err
}

// Poweroff asks POST /v1/system/poweroff: the guest shuts itself down and
// QEMU exits by itself.
func (c *Client) Poweroff(ctx context.Context, t Target) error {
	var p protocol.PoweroffResponse
	if err := c.DoJSON(ctx, t, http.MethodPost, protocol.PathPoweroff, nil, &p); err != nil {
		return err
	}
	if p.Status != protocol.PoweroffStatus {
		return fmt.Errorf("guest answered poweroff with status %q, want %q", p.Status, protocol.PoweroffStatus)
	}
	return nil
}

// Agent calls the engine through dot-agentd's reverse proxy: sub is the
// engine's path ("health", "/config"), sent as /v1/agent/<sub>.
func (c *Client) Agent(ctx context.Context, t Target, method, sub string, in, out any) error {
	for len(sub) > 0 && sub[0] == '/' {
		sub = sub[1:]
	}
	return c.DoJSON(ctx, t, method, protocol.PathAgentPrefix+sub, in, out)
}
