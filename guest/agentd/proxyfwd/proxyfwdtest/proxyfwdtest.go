// Package proxyfwdtest holds stand-ins for the proxies a person gives a
// browser identity, for tests only: a SOCKS5 proxy and an HTTP(S) proxy that
// require a user and a password, each recording what it was given. They are
// fakes at the test's edge: nothing of the product uses them.
package proxyfwdtest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The credentials the stand-ins accept: a password with the characters a
// URL has to escape.
const (
	User     = "alice"
	Password = "pa55:w@rd"
	// SiteName is a name only the stand-ins resolve (to the site they were
	// given): a page that loads under it went through them.
	SiteName = "site.invisible-dots.test"
)

// Seen is what a stand-in was given, in order.
type Seen struct {
	Auths []string // "user:password" as offered
	Dests []string // host:port as asked, before any resolution
}

type recorder struct {
	mu   sync.Mutex
	seen Seen
}

func (r *recorder) auth(a string) {
	r.mu.Lock()
	r.seen.Auths = append(r.seen.Auths, a)
	r.mu.Unlock()
}

func (r *recorder) dest(d string) {
	r.mu.Lock()
	r.seen.Dests = append(r.seen.Dests, d)
	r.mu.Unlock()
}

// Seen is a copy of what it was given so far.
func (r *recorder) Seen() Seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Seen{Auths: append([]string(nil), r.seen.Auths...), Dests: append([]string(nil), r.seen.Dests...)}
}

func escape(s string) string { return strings.NewReplacer(":", "%3A", "@", "%40").Replace(s) }

// FakeSOCKS5Proxy is a stand-in for a person's SOCKS5 proxy that requires a
// user and a password (RFC 1929). It resolves SiteName to site.
type FakeSOCKS5Proxy struct {
	recorder
	ln   net.Listener
	site string
}

// StartFakeSOCKS5Proxy listens on the loopback until the test ends.
func StartFakeSOCKS5Proxy(t testing.TB, site string) *FakeSOCKS5Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FakeSOCKS5Proxy{ln: ln, site: site}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

// URL is the proxy as a person gives it, with user and pass.
func (p *FakeSOCKS5Proxy) URL(user, pass string) string {
	return fmt.Sprintf("socks5://%s:%s@%s", user, escape(pass), p.ln.Addr())
}

func (p *FakeSOCKS5Proxy) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	var head [2]byte
	if _, err := io.ReadFull(br, head[:]); err != nil || head[0] != 5 {
		return
	}
	methods := make([]byte, head[1])
	io.ReadFull(br, methods)
	if !bytes.Contains(methods, []byte{2}) {
		p.auth("(no credentials offered)")
		c.Write([]byte{5, 0xFF})
		return
	}
	c.Write([]byte{5, 2})
	if ver, _ := br.ReadByte(); ver != 1 {
		return
	}
	ul, _ := br.ReadByte()
	user := make([]byte, ul)
	io.ReadFull(br, user)
	pl, _ := br.ReadByte()
	pass := make([]byte, pl)
	io.ReadFull(br, pass)
	p.auth(string(user) + ":" + string(pass))
	if string(user) != User || string(pass) != Password {
		c.Write([]byte{1, 1})
		return
	}
	c.Write([]byte{1, 0})
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return
	}
	var host string
	switch req[3] {
	case 1, 4:
		ip := make(net.IP, 4)
		if req[3] == 4 {
			ip = make(net.IP, 16)
		}
		io.ReadFull(br, ip)
		host = ip.String()
	case 3:
		n, _ := br.ReadByte()
		name := make([]byte, n)
		io.ReadFull(br, name)
		host = string(name)
	default:
		return
	}
	var port [2]byte
	io.ReadFull(br, port[:])
	dest := net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port[:]))))
	p.dest(dest)
	target := dest
	if host == SiteName {
		target = p.site
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Write([]byte{5, 4, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	defer up.Close()
	c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	go io.Copy(up, br)
	io.Copy(c, up)
}

// FakeHTTPProxy is a stand-in for a person's HTTP (or, over TLS, HTTPS)
// proxy that requires Basic credentials on CONNECT. It resolves SiteName to
// site.
type FakeHTTPProxy struct {
	recorder
	// Server is the proxy; its Client trusts its certificate.
	Server *httptest.Server
	site   string
}

// StartFakeHTTPProxy listens on the loopback until the test ends, over TLS
// when overTLS.
func StartFakeHTTPProxy(t testing.TB, site string, overTLS bool) *FakeHTTPProxy {
	t.Helper()
	p := &FakeHTTPProxy{site: site}
	p.Server = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	if overTLS {
		p.Server.StartTLS()
	} else {
		p.Server.Start()
	}
	t.Cleanup(p.Server.Close)
	return p
}

// URL is the proxy as a person gives it, with user and pass.
func (p *FakeHTTPProxy) URL(user, pass string) string {
	scheme := "http"
	if p.Server.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s:%s@%s", scheme, user, escape(pass), p.Server.Listener.Addr())
}

func (p *FakeHTTPProxy) serve(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Proxy-Authorization")
	if auth == "" {
		p.auth("(no credentials offered)")
	} else {
		dec, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(auth, "Basic "))
		p.auth(string(dec))
	}
	p.dest(r.Host)
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	if auth != "Basic "+base64.StdEncoding.EncodeToString([]byte(User+":"+Password)) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="stand-in"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	}
	target := r.Host
	if h, _, _ := net.SplitHostPort(r.Host); h == SiteName {
		target = p.site
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	go io.Copy(up, brw)
	io.Copy(c, up)
}
