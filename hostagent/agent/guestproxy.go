package agent

import (
	"context"
	"io"
	"net/http"

	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/hostagent/guestproxy"
	"github.com/invisible-dots/invisible-dots/hostagent/guests"
	"github.com/invisible-dots/invisible-dots/hostagent/pump"
)

// guestProxy is the agent's guestproxy.Proxy. It reaches each guest at the
// target the host's registry holds for it, which the guest link records
// (the same one the event pump and the deliverer hear of): a guest is
// reached only once its Computer is RUNNING and Ready on this host, owned
// by its Dot, with a token read from the Computer's own Secret. So the
// proxy reads nothing itself and trusts no other record of a port.
type guestProxy struct {
	host   string
	guest  pump.Streamer
	guests *guests.Registry
}

var _ guestproxy.Proxy = (*guestProxy)(nil)

func (g *guestProxy) Host() string { return g.host }

// Do sends the request on the proven channel of the Computer's guest.
func (g *guestProxy) Do(ctx context.Context, computer types.NamespacedName, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error) {
	t, ok := g.guests.Target(computer)
	if !ok {
		return nil, guestproxy.ErrNoGuest
	}
	return g.guest.Request(ctx, t, method, pathAndQuery, body, header)
}
