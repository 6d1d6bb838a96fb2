// Package harness starts the real embedded control plane on a throwaway home
// and database for tests: our envtest (envtest's binaries cannot be
// downloaded here, and ours are the product's own parts anyway). It links the
// API server, so only the few test packages that need a control plane import
// it.
package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/invisible-dots/invisible-dots/controllers"
	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	"github.com/invisible-dots/invisible-dots/internal/home"
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
	h, err := home.New(filepath.Join(dir, "home"))
	if err != nil {
		return nil, err
	}
	addr, err := FreeAddress()
	if err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Home:          h,
		ListenAddress: addr,
		DatabaseURL:   os.Getenv("HARNESS_DATABASE_URL"),
		Log:           log,
	})
	if err != nil {
		return nil, fmt.Errorf("start the test control plane: %w", err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: controllers.Scheme})
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
