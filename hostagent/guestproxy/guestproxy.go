// Package guestproxy is what a host agent offers the control plane for the
// guests of its host: one request to dot-agentd of the guest of a Computer,
// sent by the agent with the guest's token on the proven channel. A guest's
// port is on the loopback of the machine that runs its QEMU, so whatever
// talks to a guest runs in that machine's host agent (DESIGN.md 2); the
// agent lends that reach to the control plane through its guest endpoint
// (package guestendpoint), which serves this interface to the control
// plane's identity alone.
//
// The package is a leaf: the Dots API imports it (for ErrNoGuest) without
// linking the host agent. The agent's implementation is hostagent/agent's.
package guestproxy

import (
	"context"
	"errors"
	"io"
	"net/http"

	"k8s.io/apimachinery/pkg/types"
)

// Proxy does requests on the guests of one host's Computers.
type Proxy interface {
	// Host is the Host whose guests this proxy reaches.
	Host() string
	// Do sends one request to dot-agentd of the guest of the Computer
	// (namespace and name, the Dot's) and returns its raw answer, whatever
	// its status; the caller closes the body. pathAndQuery is dot-agentd's
	// ("/v1/files?path=..."; the engine's routes under /v1/agent/). It
	// fails with ErrNoGuest when the agent has no guest of that Computer
	// to reach.
	Do(ctx context.Context, computer types.NamespacedName, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error)
}

// ErrNoGuest: the host agent has no guest of that Computer it may reach
// now: the Computer is not RUNNING and Ready on its host (a guest still
// booting), is another host's, or its Dot is going. Nothing was sent.
var ErrNoGuest = errors.New("no guest of that computer to reach on this host")
