package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/guestendpoint"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// guestEndpoint is the agent's HTTPS endpoint of the guest routes, a
// manager Runnable: it listens from the agent's making (so its address is
// known to the heartbeat) and serves until the manager stops.
type guestEndpoint struct {
	ln        net.Listener
	srv       *http.Server
	published *dotsv1.HostGuestEndpoint
}

// listenGuestEndpoint listens on o.GuestListen with a certificate made for
// this run, for the control plane's identity alone.
func listenGuestEndpoint(o Options, proxy *guestProxy, c client.Client) (*guestEndpoint, error) {
	addr := o.GuestListen
	if addr == "" {
		addr = DefaultGuestListen
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the guest endpoint on %s: %w (set another address with --guest-listen)", addr, err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	advertise := o.GuestAdvertise
	if advertise == "" {
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			ln.Close()
			return nil, fmt.Errorf("the guest endpoint listens on %s, every address of this machine: name the one the control plane reaches it at with --guest-advertise", ln.Addr())
		}
		advertise = host
	}
	cert, err := guestendpoint.NewCertificate(o.HostName, []string{advertise, host})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("make the guest endpoint's certificate: %w", err)
	}
	handler := &guestendpoint.Server{
		Guests: proxy, Reviewer: &guestendpoint.TokenReviewer{Client: c},
		ControlPlane: hostidentity.GuestProxyUser, Log: o.Log.WithName("guest-endpoint"),
	}
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS13},
		ReadHeaderTimeout: 10 * time.Second,
	}
	return &guestEndpoint{
		ln: ln, srv: srv,
		published: &dotsv1.HostGuestEndpoint{URL: "https://" + net.JoinHostPort(advertise, port), CertificateSHA256: cert.SHA256},
	}, nil
}

// Start serves until ctx ends, then closes the endpoint within a few
// seconds (a request in flight is cut).
func (e *guestEndpoint) Start(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- e.srv.ServeTLS(e.ln, "", "") }()
	select {
	case err := <-done:
		return fmt.Errorf("the guest endpoint stopped: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(sctx); err != nil {
		e.srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close closes the listener of an endpoint that never started.
func (e *guestEndpoint) Close() { e.ln.Close() }
