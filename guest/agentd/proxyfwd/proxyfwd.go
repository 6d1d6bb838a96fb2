// Package proxyfwd is the local forwarder of a browser identity's proxy that
// has credentials (ref 6; `dot-agentd proxy-forward`).
//
// Chromium cannot authenticate to a SOCKS5 proxy at all, and through
// @playwright/mcp it cannot authenticate to an HTTP(S) one either: the server
// gives Playwright the proxy as one URL, Chromium's --proxy-server drops its
// user and password, and Playwright, given no separate username, answers the
// proxy's 407 with nothing. So an identity whose proxy has a user and password
// is given a proxy of its own on the loopback instead: this forwarder, run as
// dot by the relay as the parent of that identity's @playwright/mcp, speaks
// SOCKS5 without authentication on 127.0.0.1 (a port the kernel picks) to
// Chromium, and dials every connection through the real proxy with its
// credentials. Chromium sends SOCKS5 host names unresolved (and Playwright
// turns its own resolver off for a SOCKS5 proxy), so names are resolved by the
// real proxy, as they would have been.
//
// One forwarder per identity and launch: it lives as long as the server it
// runs and ends with it. The proxy reaches it in its environment
// (EnvUpstream, passed by name with the relay's --env-from), never on a
// command line, and the server is given only the local address. Nothing here
// writes the proxy, its user or its password to a log or an error.
//
// The SOCKS5 side is the few lines of RFC 1928 a CONNECT needs (no library in
// the module graph is kept for it: armon/go-socks5 is a test dependency of
// another module, unchanged since 2016); the upstream SOCKS5 client is
// golang.org/x/net/proxy (BSD-3-Clause), the HTTP CONNECT client is the
// standard library's request and response.
package proxyfwd

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/proxy"
)

// EnvUpstream is the variable the forwarder reads the real proxy from.
const EnvUpstream = "INVISIBLE_DOTS_UPSTREAM_PROXY"

// Subcommand is dot-agentd's command line of the forwarder:
//
//	dot-agentd proxy-forward --as NAME -- PROGRAM [ARGS...]
//
// PROGRAM runs with NAME=socks5://127.0.0.1:PORT in its environment and
// without EnvUpstream.
const Subcommand = "proxy-forward"

// handshakeTimeout bounds what a client of the local side has to say before
// its connection is dialed; dialTimeout bounds reaching the real proxy and,
// through it, the destination.
const (
	handshakeTimeout = 30 * time.Second
	dialTimeout      = 60 * time.Second
)

// NeedsForwarding is whether a proxy as a person gave it carries a user or a
// password Chromium could not use, in a scheme the forwarder speaks to: http,
// https, socks5 and socks5h. Any other proxy (none, one without credentials,
// a scheme Chromium itself refuses) is given to the browser unchanged, which
// judges it at its launch.
func NeedsForwarding(raw string) bool {
	u, err := parse(raw)
	return err == nil && u.User != nil
}

func parse(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		// url's error quotes the URL, password and all.
		return nil, errors.New("the proxy is not a URL")
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https", "socks5", "socks5h":
	default:
		return nil, fmt.Errorf("the proxy's scheme %q is not http, https, socks5 or socks5h", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("the proxy names no host")
	}
	return u, nil
}

// Dialer dials through the proxy raw (with its credentials, if any).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewDialer is the upstream side: SOCKS5 with x/net/proxy, HTTP and HTTPS
// with a CONNECT request. Its errors never hold the proxy's credentials.
func NewDialer(raw string) (Dialer, error) {
	u, err := parse(raw)
	if err != nil {
		return nil, err
	}
	direct := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	host := u.Host
	switch scheme := strings.ToLower(u.Scheme); scheme {
	case "socks5", "socks5h":
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "1080")
		}
		var auth *proxy.Auth
		if u.User != nil {
			pw, _ := u.User.Password()
			auth = &proxy.Auth{User: u.User.Username(), Password: pw}
		}
		d, err := proxy.SOCKS5("tcp", host, auth, direct)
		if err != nil {
			return nil, errors.New("the SOCKS5 proxy could not be set up")
		}
		cd, ok := d.(proxy.ContextDialer)
		if !ok {
			return nil, errors.New("the SOCKS5 dialer takes no context")
		}
		return cd, nil
	default:
		if u.Port() == "" {
			port := "80"
			if scheme == "https" {
				port = "443"
			}
			host = net.JoinHostPort(u.Hostname(), port)
		}
		c := &connectDialer{addr: host, direct: direct}
		if scheme == "https" {
			c.tls = &tls.Config{ServerName: u.Hostname(), RootCAs: rootCAs}
		}
		if u.User != nil {
			pw, _ := u.User.Password()
			c.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))
		}
		return c, nil
	}
}

// rootCAs are the authorities an https proxy's certificate is checked
// against: the system's (nil), or a test's.
var rootCAs *x509.CertPool

// connectDialer reaches a destination through an HTTP(S) proxy's CONNECT.
type connectDialer struct {
	addr   string
	tls    *tls.Config
	auth   string
	direct *net.Dialer
}

func (c *connectDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := c.direct.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("reach the proxy %s: %w", c.addr, err)
	}
	if c.tls != nil {
		tc := tls.Client(conn, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS with the proxy %s: %w", c.addr, err)
		}
		conn = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if c.auth != "" {
		req.Header.Set("Proxy-Authorization", c.auth)
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("CONNECT %s through %s: %w", addr, c.addr, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("CONNECT %s through %s: %w", addr, c.addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("CONNECT %s through %s: the proxy answered %s", addr, c.addr, resp.Status)
	}
	conn.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		// What the destination sent right after the proxy's answer.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// Forwarder is the local SOCKS5 side.
type Forwarder struct {
	ln   net.Listener
	dial Dialer
	// Logf says what went wrong with a connection (never the credentials);
	// nil says nothing.
	Logf func(format string, a ...any)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	warned bool
}

// Listen opens the local side on 127.0.0.1 and a port the kernel picks.
func Listen(d Dialer) (*Forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on the loopback: %w", err)
	}
	return &Forwarder{ln: ln, dial: d, conns: map[net.Conn]struct{}{}}, nil
}

// URL is the proxy the browser is given.
func (f *Forwarder) URL() string { return "socks5://" + f.ln.Addr().String() }

// Serve forwards connections until Close.
func (f *Forwarder) Serve() error {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			f.mu.Lock()
			closed := f.closed
			f.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		if !f.track(c) {
			c.Close()
			return nil
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.untrack(c)
			f.serve(c)
		}()
	}
}

func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// Close stops listening and ends every forwarded connection.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	err := f.ln.Close()
	f.wg.Wait()
	return err
}

func (f *Forwarder) logf(format string, a ...any) {
	if f.Logf != nil {
		f.Logf(format, a...)
	}
}

// SOCKS5 (RFC 1928) as the local side speaks it.
const (
	socksVersion       = 5
	methodNone         = 0x00
	methodNoAcceptable = 0xFF
	cmdConnect         = 0x01
	atypIPv4           = 0x01
	atypDomain         = 0x03
	atypIPv6           = 0x04
	repSucceeded       = 0x00
	repHostUnreachable = 0x04
	repCmdUnsupported  = 0x07
	repAtypUnsupported = 0x08
)

func (f *Forwarder) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReader(c)
	addr, err := handshake(br, c)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := f.dial.DialContext(ctx, "tcp", addr)
	cancel()
	if err != nil {
		f.mu.Lock()
		first := !f.warned
		f.warned = true
		f.mu.Unlock()
		if first {
			f.logf("proxy-forward: the identity's proxy did not connect a browser's connection: %v", err)
		}
		reply(c, repHostUnreachable)
		return
	}
	defer up.Close()
	if err := reply(c, repSucceeded); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.conns[up] = struct{}{}
	f.mu.Unlock()
	defer f.untrack(up)
	done := make(chan struct{}, 2)
	pipe := func(dst net.Conn, src io.Reader) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(up, br) // br holds nothing beyond the request: the client waits for the reply
	go pipe(c, up)
	<-done
	<-done
}

// handshake reads a client's greeting and CONNECT request and returns the
// destination as host:port; what it refuses is answered on the way.
func handshake(br *bufio.Reader, w io.Writer) (string, error) {
	var head [2]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return "", err
	}
	if head[0] != socksVersion {
		return "", fmt.Errorf("SOCKS version %d", head[0])
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return "", err
	}
	none := false
	for _, m := range methods {
		none = none || m == methodNone
	}
	if !none {
		w.Write([]byte{socksVersion, methodNoAcceptable})
		return "", errors.New("the client offers no method without authentication")
	}
	if _, err := w.Write([]byte{socksVersion, methodNone}); err != nil {
		return "", err
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return "", err
	}
	if req[0] != socksVersion {
		return "", fmt.Errorf("SOCKS version %d", req[0])
	}
	var host string
	switch req[3] {
	case atypIPv4, atypIPv6:
		ip := make(net.IP, 4)
		if req[3] == atypIPv6 {
			ip = make(net.IP, 16)
		}
		if _, err := io.ReadFull(br, ip); err != nil {
			return "", err
		}
		host = ip.String()
	case atypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			return "", err
		}
		host = string(name)
	default:
		reply(w, repAtypUnsupported)
		return "", fmt.Errorf("address type %d", req[3])
	}
	var port [2]byte
	if _, err := io.ReadFull(br, port[:]); err != nil {
		return "", err
	}
	if req[1] != cmdConnect {
		reply(w, repCmdUnsupported)
		return "", fmt.Errorf("command %d", req[1])
	}
	return net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port[:])))), nil
}

// reply answers a request; the bound address is not one the client uses.
func reply(w io.Writer, code byte) error {
	_, err := w.Write([]byte{socksVersion, code, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}
