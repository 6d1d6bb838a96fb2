// Package guestendpoint is a host agent's HTTPS endpoint of the guest
// routes, kubelet's shape: the control plane reaches the guest of any
// Computer through the agent of the Computer's host, whichever machine that
// is, and by no other way (DESIGN.md 2). A guest's port is on the loopback of
// the machine that runs its QEMU, so only that machine's agent can talk to
// it; this endpoint is how the agent lends that reach to the control plane.
//
// Who may ask: the control plane's own identity alone, proven by a bearer
// token the API server vouches for (a TokenReview for this endpoint's
// audience, as kubelet delegates its authentication), never a person, another
// host or a guest. What may be asked: the guests of this host's Computers
// only (the agent's guest registry knows no other). The serving certificate
// is the agent's own, made at its start; its digest is published on the
// agent's Host, which only the host's own credential may write, and the
// control plane trusts exactly that certificate.
//
// A request is GET|POST|PUT|DELETE /guests/{namespace}/{name}/{route...}
// with dot-agentd's route and query; the answer is the guest's own (status,
// type and body). A request that reached no guest answers with a status of
// its own and the header X-Guest-Unreached saying why (GuestUnreached*), so
// the control plane words it as it words an in-process failure.
package guestendpoint

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestproxy"
)

// Audience is the audience of the tokens the endpoint accepts: a token the
// control plane asked for this endpoint, useless against the API server
// and anything else.
const Audience = "dots.invisible.dev/host-agent"

// PathPrefix starts every request's path.
const PathPrefix = "/guests/"

// HeaderUnreached names why a request reached no guest; absent on the
// guest's own answers.
const HeaderUnreached = "X-Guest-Unreached"

// Why a request reached no guest (HeaderUnreached's values).
const (
	// UnreachedNoGuest: this host has no guest of that Computer to reach
	// now (guestproxy.ErrNoGuest).
	UnreachedNoGuest = "no_guest"
	// UnreachedUnproven: the listener on the guest port did not prove it
	// holds the Dot's token (guestclient.ErrGuestUnproven).
	UnreachedUnproven = "unproven"
	// UnreachedNotAnswering: the guest does not answer yet
	// (guestclient.ErrGuestNotAnswering).
	UnreachedNotAnswering = "not_answering"
	// UnreachedTimeout: the guest did not answer in time.
	UnreachedTimeout = "timeout"
	// UnreachedFailed: the request did not complete.
	UnreachedFailed = "failed"
)

// Unreached is the error a caller of the endpoint gets for an answer with
// HeaderUnreached, wrapping the in-process error of the same meaning.
func Unreached(why string) error {
	switch why {
	case UnreachedNoGuest:
		return guestproxy.ErrNoGuest
	case UnreachedUnproven:
		return guestclient.ErrGuestUnproven
	case UnreachedNotAnswering:
		return guestclient.ErrGuestNotAnswering
	case UnreachedTimeout:
		return context.DeadlineExceeded
	}
	return errors.New("the host agent's request to the guest did not complete")
}

// unreached is HeaderUnreached's value for a Do error.
func unreached(err error) (string, int) {
	switch {
	case errors.Is(err, guestproxy.ErrNoGuest):
		return UnreachedNoGuest, http.StatusNotFound
	case errors.Is(err, guestclient.ErrGuestUnproven):
		return UnreachedUnproven, http.StatusBadGateway
	case errors.Is(err, guestclient.ErrGuestNotAnswering):
		return UnreachedNotAnswering, http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return UnreachedTimeout, http.StatusGatewayTimeout
	}
	return UnreachedFailed, http.StatusBadGateway
}

// Reviewer says who a bearer token is, as the API server vouches: the user
// name, or an error when the token is not valid for Audience.
type Reviewer interface {
	Review(ctx context.Context, token string) (string, error)
}

// TokenReviewer asks the API server (a TokenReview for Audience) and keeps
// a vouched token's user for a minute, so a burst of requests asks once.
type TokenReviewer struct {
	Client client.Client

	mu    sync.Mutex
	cache map[[32]byte]reviewed
}

type reviewed struct {
	user  string
	until time.Time
}

// reviewCacheFor bounds how long a vouched token is believed without
// asking again: a token the control plane no longer holds ages out of its
// own short life anyway.
const reviewCacheFor = time.Minute

// errNotVouched: the API server did not vouch for the token.
var errNotVouched = errors.New("the API server does not vouch for this token for the host agent's endpoint")

// Review implements Reviewer.
func (r *TokenReviewer) Review(ctx context.Context, token string) (string, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	r.mu.Lock()
	if c, ok := r.cache[key]; ok && now.Before(c.until) {
		r.mu.Unlock()
		return c.user, nil
	}
	r.mu.Unlock()
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{Audience}}}
	if err := r.Client.Create(ctx, tr); err != nil {
		return "", fmt.Errorf("ask the API server who the caller is: %w", err)
	}
	if !tr.Status.Authenticated || !audienceOK(tr.Status.Audiences) {
		return "", errNotVouched
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[[32]byte]reviewed{}
	}
	for k, c := range r.cache {
		if now.After(c.until) {
			delete(r.cache, k)
		}
	}
	r.cache[key] = reviewed{user: tr.Status.User.Username, until: now.Add(reviewCacheFor)}
	r.mu.Unlock()
	return tr.Status.User.Username, nil
}

// audienceOK: the API server says the token is for this endpoint (an empty
// list is an authenticator that ignores audiences; refused).
func audienceOK(aud []string) bool {
	for _, a := range aud {
		if a == Audience {
			return true
		}
	}
	return false
}

// Server serves the endpoint.
type Server struct {
	// Guests reaches this host's guests (the agent's registry).
	Guests guestproxy.Proxy
	// Reviewer says who a token is.
	Reviewer Reviewer
	// ControlPlane is the user name of the control plane's identity, the
	// only caller served.
	ControlPlane string
	Log          logr.Logger
}

// maxRequestBody bounds what is passed on to a guest: its largest body is a
// file written through the files route.
const maxRequestBody = 256 << 20

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		http.Error(w, "a bearer token of the control plane is needed", http.StatusUnauthorized)
		return
	}
	user, err := s.Reviewer.Review(r.Context(), token)
	if err != nil {
		// The API server's answer is not repeated to an unknown caller.
		s.Log.V(1).Info("a request to the guest endpoint was not authenticated", "err", err.Error(), "remote", r.RemoteAddr)
		http.Error(w, "the token is not the control plane's for this endpoint", http.StatusUnauthorized)
		return
	}
	if user != s.ControlPlane {
		s.Log.Info("a request to the guest endpoint from another identity was refused", "user", user, "remote", r.RemoteAddr)
		http.Error(w, "only the control plane is served here", http.StatusForbidden)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	ns, rest, ok1 := strings.Cut(rest, "/")
	name, route, ok2 := strings.Cut(rest, "/")
	if !ok || !ok1 || !ok2 || ns == "" || name == "" || route == "" {
		http.Error(w, "the path is "+PathPrefix+"{namespace}/{name}/{dot-agentd route}", http.StatusNotFound)
		return
	}
	pathAndQuery := "/" + route
	if r.URL.RawQuery != "" {
		pathAndQuery += "?" + r.URL.RawQuery
	}
	var header http.Header
	if ct := r.Header.Get("Content-Type"); ct != "" {
		header = http.Header{"Content-Type": {ct}}
	}
	var body io.Reader
	if r.ContentLength != 0 {
		body = http.MaxBytesReader(w, r.Body, maxRequestBody)
	}
	resp, err := s.Guests.Do(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, r.Method, pathAndQuery, body, header)
	if err != nil {
		why, status := unreached(err)
		w.Header().Set(HeaderUnreached, why)
		http.Error(w, "the guest was not reached: "+why, status)
		return
	}
	defer resp.Body.Close()
	for _, k := range []string{"Content-Type", "Content-Length", "Content-Disposition", "Last-Modified", "X-Content-Type-Options"} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	// Passed on as it comes: a file or an event stream is not held whole.
	buf := make([]byte, 32<<10)
	flusher, _ := w.(http.Flusher)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// Certificate is a serving certificate made for one run of the agent.
type Certificate struct {
	TLS tls.Certificate
	// SHA256 is the digest of its DER, lowercase hex: what the Host
	// publishes and the control plane pins.
	SHA256 string
}

// certificateLife bounds a serving certificate: an agent runs for months,
// and a new one is made at every start.
const certificateLife = 2 * 365 * 24 * time.Hour

// NewCertificate makes a self-signed ECDSA P-256 serving certificate for
// the host's names and addresses. It is never written to disk: a new start
// makes a new one and publishes its digest.
func NewCertificate(host string, hosts []string) (Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "invisible-dots host agent " + host},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certificateLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Certificate{}, err
	}
	sum := sha256.Sum256(der)
	return Certificate{TLS: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, SHA256: hex.EncodeToString(sum[:])}, nil
}

// PinnedTLS is the client side: a TLS config that accepts exactly the
// certificate whose DER has the digest want (what the Host publishes), and
// nothing else, whatever names it holds.
func PinnedTLS(want string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is not a CA's: the one certificate is checked below.
		InsecureSkipVerify: true, //nolint:gosec // pinned by digest in VerifyPeerCertificate
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("the host agent showed no certificate")
			}
			sum := sha256.Sum256(raw[0])
			if hex.EncodeToString(sum[:]) != want {
				return errors.New("the host agent's certificate is not the one its Host publishes")
			}
			return nil
		},
	}
}
