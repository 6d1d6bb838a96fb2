// Package harness starts the real embedded control plane on a throwaway home
// and database for tests: our envtest (envtest's binaries cannot be
// downloaded here, and ours are the product's own parts anyway). It links the
// API server, so only the few test packages that need a control plane import
// it.
package harness

import (
	"context"
	"fmt"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// ControlPlane is a started control plane for a test.
type ControlPlane struct {
	*controlplane.ControlPlane
	Home home.Layout
	// Client is a controller-runtime client that knows our kinds.
	Client client.Client
	// Address is the API server's host:port.
	Address string
}

// Start starts a control plane in a fresh home under dir (a short path: the
// PostgreSQL socket path must stay under 107 bytes). The caller stops it.
func Start(ctx context.Context, dir string, log logr.Logger) (*ControlPlane, error) {
	return StartWith(ctx, dir, log, Options{})
}

// Options change what StartWith starts.
type Options struct {
	// Address is the API server's host:port; a free port when empty. A
	// control plane started again on the same dir and Address is the
	// same server restarted: same database, CA and token.
	Address string
	// RequestTimeout replaces the API server's request timeout when set.
	RequestTimeout time.Duration
	// Channels are the messaging channel types the Dots API checks
	// credentials of (a test's fake Telegram).
	Channels hub.Kinds
	// ChannelLinks are the link codes the Dots API streams (a test's fake
	// WhatsApp program's).
	ChannelLinks *port.Links
}

// StartWith is Start with Options. dir may hold a home a stopped control
// plane left: it starts on its database again.
func StartWith(ctx context.Context, dir string, log logr.Logger, o Options) (*ControlPlane, error) {
	h, err := home.New(filepath.Join(dir, "home"))
	if err != nil {
		return nil, err
	}
	addr := o.Address
	if addr == "" {
		if addr, err = FreeAddress(); err != nil {
			return nil, err
		}
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Home:           h,
		ListenAddress:  addr,
		DatabaseURL:    os.Getenv("HARNESS_DATABASE_URL"),
		RequestTimeout: o.RequestTimeout,
		Channels:       o.Channels,
		ChannelLinks:   o.ChannelLinks,
		Log:            log,
	})
	if err != nil {
		return nil, fmt.Errorf("start the test control plane: %w", err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		cp.Stop(ctx)
		return nil, err
	}
	return &ControlPlane{ControlPlane: cp, Home: h, Client: c, Address: addr}, nil
}

// FreeAddress returns a loopback address with a port free right now.
func FreeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
