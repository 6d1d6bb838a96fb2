package controlplane

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
	"github.com/invisible-dots/invisible-dots/internal/postgres"
)

// dotsAPIExtras is what the Dots API is given of the server beyond its
// store: its home (the health, the doctor).
type dotsAPIExtras struct {
	home     home.Layout
	channels hub.Kinds
	links    *port.Links
	// webURL is the web client's address, for the OpenAI-compatible
	// endpoint's approval messages.
	webURL string
}

// channelLinks is links as the Dots API takes it: nil (no WhatsApp) stays
// a nil interface.
func (x dotsAPIExtras) channelLinks() dotsapi.ChannelLinks {
	if x.links == nil {
		return nil
	}
	return x.links
}

func (x dotsAPIExtras) serverInfo(db *postgres.Instance) dotsapi.ServerInfo {
	kind := wire.DatabaseExternal
	if db.Managed() {
		kind = wire.DatabaseManaged
	}
	return dotsapi.ServerInfo{DatabaseKind: kind, Home: x.home.Root, LogsDir: x.home.Logs()}
}

// serverDoctor runs the doctor of `invisible-dots doctor` on the server's
// own machine and home; only its key row reads differently, from the API
// server in process instead of through the home's kubeconfig.
func serverDoctor(h home.Layout, r client.Reader) func(ctx context.Context) doctor.Report {
	return func(ctx context.Context) doctor.Report {
		deps := doctor.Real(h)
		deps.OpenRouterKey = func(ctx context.Context) (bool, error) { return keystore.DefaultKeyStored(ctx, r) }
		return doctor.Run(ctx, deps)
	}
}
