package agent

import (
	"context"
	"io"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestlink"
	"github.com/invisible-dots/invisible-dots/hostagent/guestproxy"
	"github.com/invisible-dots/invisible-dots/hostagent/pump"
)

// guests is the agent's guestproxy.Proxy. It learns where each guest is
// from the guest link's notices, the same ones the event pump and the
// deliverer follow: a guest is reached only once its Computer is RUNNING
// and Ready on this host, owned by its Dot, with a token the link read from
// the Computer's own Secret. So the proxy reads nothing itself and trusts
// no other record of a port.
type guests struct {
	host  string
	guest pump.Streamer

	mu      sync.Mutex
	targets map[types.NamespacedName]guestclient.Target
}

var (
	_ guestproxy.Proxy   = (*guests)(nil)
	_ guestlink.Listener = (*guests)(nil)
)

func newGuests(host string, guest pump.Streamer) *guests {
	return &guests{host: host, guest: guest, targets: map[types.NamespacedName]guestclient.Target{}}
}

// GuestNotice keeps the Dot's guest, or forgets it when it has none to
// reach. It never blocks.
func (g *guests) GuestNotice(n guestlink.Notice) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n.Target == (guestclient.Target{}) {
		delete(g.targets, n.Key)
		return
	}
	g.targets[n.Key] = n.Target
}

func (g *guests) Host() string { return g.host }

// Do sends the request on the proven channel of the Computer's guest.
func (g *guests) Do(ctx context.Context, computer types.NamespacedName, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error) {
	g.mu.Lock()
	t, ok := g.targets[computer]
	g.mu.Unlock()
	if !ok {
		return nil, guestproxy.ErrNoGuest
	}
	return g.guest.Request(ctx, t, method, pathAndQuery, body, header)
}
