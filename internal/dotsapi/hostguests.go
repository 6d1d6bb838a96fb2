package dotsapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/guestendpoint"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
)

// Guests reaches the guest of a Computer through the agent of the host it
// is placed on. HostGuests is the product's.
type Guests interface {
	// Do sends one request to dot-agentd of the guest of the Computer
	// (namespace and name, the Dot's) placed on host, and returns its raw
	// answer, whatever its status; the caller closes the body.
	// pathAndQuery is dot-agentd's ("/v1/files?path=..."). A request that
	// reached no guest fails with ErrHostUnreachable (the host's agent
	// could not be asked) or the error the agent said
	// (guestendpoint.Unreached).
	Do(ctx context.Context, host string, computer types.NamespacedName, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error)
}

// ErrHostUnreachable: the agent of the Computer's host could not be asked.
// HostUnreachableError says which host and why.
var ErrHostUnreachable = errors.New("the host's agent cannot be reached")

// HostUnreachableError is a request that could not ask the agent of Host:
// Why is what failed (no Host, no endpoint, a refused connection), in words
// that hold no token.
type HostUnreachableError struct{ Host, Why string }

func (e *HostUnreachableError) Error() string {
	return fmt.Sprintf("%v: host %s: %s", ErrHostUnreachable, e.Host, e.Why)
}

func (e *HostUnreachableError) Unwrap() error { return ErrHostUnreachable }

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=hosts,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=invisible-dots-system,resources=serviceaccounts/token,verbs=create,resourceNames=invisible-dots-guest-proxy

// HostGuests reaches every guest through its host agent's HTTPS endpoint
// (package guestendpoint), the in-process agent's included: one path on
// every host (DESIGN.md 2). The endpoint's address and certificate are
// read from its Host, which only that host's credential may write; the
// control plane proves itself with a short-lived token of its own
// ServiceAccount for the endpoints' audience alone.
type HostGuests struct {
	// Reader reads Hosts; Writer asks the API server for tokens.
	Reader client.Reader
	Writer client.Client
	// DialTimeout bounds reaching an agent (5 s when zero): an agent that
	// does not take the connection by then is unreachable.
	DialTimeout time.Duration

	mu         sync.Mutex
	token      string
	tokenUntil time.Time
	transports map[string]*http.Transport // by certificate digest
}

var _ Guests = (*HostGuests)(nil)

// guestProxyTokenLife is a token's life: the shortest the API server issues.
// It is asked again when less than a third of it is left.
const guestProxyTokenLife = 10 * time.Minute

// Do implements Guests.
func (g *HostGuests) Do(ctx context.Context, host string, computer types.NamespacedName, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error) {
	unreachable := func(format string, a ...any) error {
		return &HostUnreachableError{Host: host, Why: fmt.Sprintf(format, a...)}
	}
	h := &dotsv1.Host{}
	if err := g.Reader.Get(ctx, client.ObjectKey{Name: host}, h); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, unreachable("there is no such Host (kubectl get hosts)")
		}
		return nil, unreachable("its Host cannot be read: %v", err)
	}
	ep := h.Status.GuestEndpoint
	if ep == nil {
		return nil, unreachable("its agent has not published a guest endpoint (it has not started, or is older than the control plane: update it)")
	}
	token, err := g.controlPlaneToken(ctx)
	if err != nil {
		return nil, unreachable("the control plane's token for the host agents: %v", err)
	}
	u := ep.URL + guestendpoint.PathPrefix + url.PathEscape(computer.Namespace) + "/" + url.PathEscape(computer.Name) + pathAndQuery
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, unreachable("%v", err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Transport: g.transport(ep.CertificateSHA256)}).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The URL's error names the endpoint, never the token.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, unreachable("its agent's endpoint %s did not answer: %v", ep.URL, err)
	}
	if why := resp.Header.Get(guestendpoint.HeaderUnreached); why != "" {
		resp.Body.Close()
		return nil, fmt.Errorf("host %s: %w", host, guestendpoint.Unreached(why))
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		// The agent refused the control plane itself: its API server does
		// not vouch for the token, or it is another control plane's.
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		resp.Body.Close()
		return nil, unreachable("its agent refused the control plane (%d: %s)", resp.StatusCode, strings.TrimSpace(printable(string(msg), 200)))
	}
	return resp, nil
}

// transport is the pinned transport of one agent certificate.
func (g *HostGuests) transport(digest string) *http.Transport {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.transports[digest]; ok {
		return t
	}
	if g.transports == nil {
		g.transports = map[string]*http.Transport{}
	}
	timeout := g.DialTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	t := &http.Transport{
		TLSClientConfig:     guestendpoint.PinnedTLS(digest),
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	g.transports[digest] = t
	return t
}

// controlPlaneToken is a token of the control plane's ServiceAccount for
// the host agents' audience, asked again before it ages out.
func (g *HostGuests) controlPlaneToken(ctx context.Context) (string, error) {
	g.mu.Lock()
	if g.token != "" && time.Until(g.tokenUntil) > guestProxyTokenLife/3 {
		defer g.mu.Unlock()
		return g.token, nil
	}
	g.mu.Unlock()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: hostidentity.GuestProxyServiceAccount}}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{guestendpoint.Audience},
		ExpirationSeconds: ptr.To(int64(guestProxyTokenLife / time.Second)),
	}}
	if err := g.Writer.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("ask a token of the ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.token, g.tokenUntil = tr.Status.Token, tr.Status.ExpirationTimestamp.Time
	return g.token, nil
}
