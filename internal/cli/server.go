package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/controllers"
	"github.com/invisible-dots/invisible-dots/hostagent/agent"
	"github.com/invisible-dots/invisible-dots/internal/apiserver"
	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/hooks"
	"github.com/invisible-dots/invisible-dots/internal/memlimit"
	"github.com/invisible-dots/invisible-dots/internal/postgres"
	"github.com/invisible-dots/invisible-dots/internal/webui"
	"github.com/invisible-dots/invisible-dots/web"
)

// Environment variables the server reads.
const (
	envListen      = "INVISIBLE_DOTS_LISTEN"
	envDatabaseURL = "DATABASE_URL"
	// envHost names this machine's Host for server and agent (--host).
	envHost = "INVISIBLE_DOTS_HOST"
	// envEtcdServers stores the embedded API server's resources in an
	// external etcd (comma-separated client URLs) instead of kine on
	// PostgreSQL, for comparison benchmarks only (test/bench); PostgreSQL
	// still runs for everything else.
	envEtcdServers = "INVISIBLE_DOTS_ETCD_SERVERS"
)

// startSettles is how long after the control plane is ready the controllers
// have listed what they cache, when the start's memory is given back.
const startSettles = 5 * time.Second

func newServerCommand() *cobra.Command {
	var (
		noWeb         bool
		webSignIn     bool
		kubeconfig    string
		hostName      string
		noControllers bool
		profiling     bool
		verbosity     int
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane in the foreground: PostgreSQL, the API server, the controllers, this host's agent",
		Long: `server runs everything in one process until Ctrl-C (SIGINT), SIGTERM or SIGHUP:
a managed PostgreSQL (or DATABASE_URL), the Kubernetes API server on
INVISIBLE_DOTS_LISTEN (default 127.0.0.1:8787), the CRDs, the central
controllers, the host agent of this machine (its Host is --host, by
default the machine's host name), and the web client on
INVISIBLE_DOTS_WEB_LISTEN (default http://127.0.0.2:3000; --no-web turns it
off), which adds the API credential itself for the machine's owner. With
--web-sign-in, people sign in to it with the token 'invisible-dots user add'
made for them and act with their own rights; an address others reach
(127.0.0.1, which every guest reaches, or one of another network, served
over HTTPS with a certificate of the server's CA, pki/ca.crt) turns sign-in
on. With INVISIBLE_DOTS_HOOKS_LISTEN (host:port; off by default) it serves
the Webhooks there, plain HTTP for a reverse proxy or tunnel to put behind
TLS (invisible-dots webhook --help). The channel hub polls Telegram for the Dots' Channels
(INVISIBLE_DOTS_TELEGRAM_API, default https://api.telegram.org). Once idle,
it gives the memory a burst of work took back to the system (the Go
runtime's memory limit follows its live heap; GOMEMLIMIT, when set, is kept
instead). It writes
$INVISIBLE_DOTS_HOME/kubeconfig for kubectl:

  export KUBECONFIG=~/.invisible-dots/kubeconfig
  kubectl get dots`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(verbosity)
			ctrl.SetLogger(log)
			// The runtime's memory limit follows what the server holds
			// once it is idle; GOMEMLIMIT in the environment fixes it.
			defer memlimit.Start().Stop()
			if noControllers && kubeconfig != "" {
				return fmt.Errorf("--no-controllers serves the embedded API alone and --kubeconfig runs the controllers against another: choose one")
			}
			layout, err := home.FromEnv()
			if err != nil {
				return err
			}
			listen := os.Getenv(envListen)
			if listen == "" {
				listen = controlplane.DefaultListenAddress
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()

			// Read before anything starts: a malformed setting fails at once.
			webListen, err := webui.ParseListen(os.Getenv(webui.EnvListen), webSignIn)
			if err != nil {
				return err
			}
			etcdServers, err := parseEtcdServers(os.Getenv(envEtcdServers))
			if err != nil {
				return err
			}
			hooksListen, err := parseHooksListen(os.Getenv(hooks.EnvListen))
			if err != nil {
				return err
			}
			channelKinds, channelLinks := channelKinds(ctx, layout, log)
			webAt := ""
			if !noWeb {
				webAt = webListen.URL()
			}
			cp, err := controlplane.Start(ctx, controlplane.Options{
				Home:               layout,
				ListenAddress:      listen,
				DatabaseURL:        os.Getenv(envDatabaseURL),
				ExternalKubeconfig: kubeconfig,
				EtcdServers:        etcdServers,
				Channels:           channelKinds,
				ChannelLinks:       channelLinks,
				WebURL:             webAt,
				Profiling:          profiling,
				Log:                log,
			})
			if err != nil {
				return err
			}
			ctx, lost := stopWhenDatabaseLost(ctx, cp.DB)
			defer func() {
				log.Info("stopping the control plane")
				cp.Stop(context.WithoutCancel(ctx))
				log.Info("stopped")
			}()
			webURL := ""
			if noWeb {
				log.V(1).Info("the web client is off (--no-web)")
			} else if stopWeb := startWeb(cp, layout, webListen, log); stopWeb != nil {
				defer stopWeb(context.WithoutCancel(ctx))
				webURL = webListen.URL()
				if webListen.SignIn {
					webURL += " (people sign in with the token 'invisible-dots user add' makes for them)"
				}
			}
			if cp.DotsAPI != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "\ninvisible-dots is ready against the cluster of %s. Its Dots API is at %s (the ConfigMap %s/%s says so to every client).\n", kubeconfig, cp.DotsAPI.URL, dotsv1.SystemNamespace, wire.DiscoveryConfigMap)
				if webURL != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "Open %s.\n", webURL)
				}
				fmt.Fprintln(cmd.ErrOrStderr())
			}
			if cp.KubeconfigPath != "" {
				if webURL != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "\ninvisible-dots is ready. Open %s, or use it with:\n  export KUBECONFIG=%s\n  kubectl get dots\n\n", webURL, cp.KubeconfigPath)
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "\ninvisible-dots is ready. Use it with:\n  export KUBECONFIG=%s\n  kubectl get dots\n\n", cp.KubeconfigPath)
				}
			}
			// Once the controllers filled their caches, what the start
			// took and no longer holds goes back to the system.
			defer memlimit.ReleaseStartAfter(startSettles)()
			if noControllers {
				log.Info("serving the API alone (--no-controllers): the central controllers and host agents run elsewhere")
				select {
				case <-ctx.Done():
				case <-apiStoppedOrNever(cp):
					return fmt.Errorf("the API server stopped")
				}
				return shutdownCause(log, lost)
			}
			if hostName == "" {
				if hostName, err = agent.DefaultHostName(); err != nil {
					return err
				}
			}
			central, err := controllers.NewManager(ctx, controllers.Options{
				Config:       cp.Config,
				Log:          log.WithName("controllers"),
				Embedded:     kubeconfig == "",
				Store:        cp.Store(),
				Channels:     channelKinds,
				ChannelLinks: channelLinks,
			})
			if err != nil {
				return err
			}
			if err := addHooksListener(central, hooksListen, log); err != nil {
				return err
			}
			// The Dots API reaches this host's guests through this agent's
			// guest endpoint, as any other host's (DESIGN.md 2: whatever
			// talks to a guest runs in its host's agent); on the loopback,
			// since the server runs on this machine.
			hostAgent, err := newHostAgent(ctx, cp.Config, layout, hostName, guestEndpoint{}, log)
			if err != nil {
				return err
			}
			err = runManagers(ctx, apiStopped(cp), log, central, hostAgent)
			if err != nil && ctx.Err() == nil {
				return err
			}
			return shutdownCause(log, lost)
		},
	}
	cmd.Flags().BoolVar(&noWeb, "no-web", false, "do not serve the web client")
	cmd.Flags().BoolVar(&webSignIn, "web-sign-in", false, "people sign in to the web client with their own token ('invisible-dots user add'); the server's credential is never used for them (always on where others reach the web client)")
	cmd.Flags().BoolVar(&noControllers, "no-controllers", false, "serve the API and its database alone: the central controllers (server --kubeconfig) and host agents (agent) run elsewhere")
	cmd.Flags().BoolVar(&profiling, "profiling", false, "serve Go's pprof at /debug/pprof on the API port, to the admin's token (for finding where time goes: go tool pprof)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "run the controllers against the cluster of this kubeconfig instead of the embedded API server")
	cmd.Flags().StringVar(&hostName, "host", os.Getenv(envHost), "the name of this machine's Host (default: $"+envHost+", else the machine's host name)")
	cmd.Flags().IntVarP(&verbosity, "v", "v", 0, "log verbosity (0 = events only)")
	return cmd
}

// parseEtcdServers reads INVISIBLE_DOTS_ETCD_SERVERS: comma-separated
// http, https or unix URLs of etcd's client endpoints; empty is none.
func parseEtcdServers(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		u, err := url.Parse(s)
		if err == nil && u.User != nil {
			// Never echoed: it holds a credential, which would then be in
			// the log and the error.
			return nil, fmt.Errorf("%s names a URL with a user and password; the embedded API server takes none in it: name the endpoint alone", envEtcdServers)
		}
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix") || (u.Host == "" && u.Path == "") {
			return nil, fmt.Errorf("%s=%q: %q is not an http, https or unix URL of an etcd client endpoint", envEtcdServers, v, s)
		}
		out = append(out, s)
	}
	return out, nil
}

// parseHooksListen reads INVISIBLE_DOTS_HOOKS_LISTEN: host:port, or empty
// for no webhooks listener.
func parseHooksListen(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		return "", fmt.Errorf("%s=%q is not host:port (127.0.0.1:8790, or :8790 for every address)", hooks.EnvListen, v)
	}
	return v, nil
}

// addHooksListener runs the webhooks listener with the central controllers
// when addr is set: in every server, leading or not (a delivery's Task has
// one name whichever server makes it), stopped with the manager. It reads
// Webhooks through the manager's cache and their Secrets from the API
// server (the manager caches none).
func addHooksListener(mgr ctrl.Manager, addr string, log logr.Logger) error {
	if addr == "" {
		log.V(1).Info("the webhooks listener is off (" + hooks.EnvListen + " is not set)")
		return nil
	}
	return mgr.Add(hooks.New(hooks.Options{
		Address:      addr,
		Reader:       mgr.GetClient(),
		SecretReader: mgr.GetAPIReader(),
		Client:       mgr.GetClient(),
		Log:          log.WithName("webhooks"),
	}))
}

// stopWhenDatabaseLost ends ctx when the control plane's database is lost
// for good (another control plane took its lock while this one was cut off
// from it: two must never reconcile the same Dots). A PostgreSQL that dies
// or a session that is cut is not that: the database's watcher brings them
// back. lost says why ctx ended, nil for a signal.
func stopWhenDatabaseLost(ctx context.Context, db *postgres.Instance) (context.Context, func() error) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case err := <-db.Failed():
			cancel(err)
		case <-ctx.Done():
		}
	}()
	return ctx, func() error {
		if cause := context.Cause(ctx); errors.Is(cause, postgres.ErrLockTaken) {
			return cause
		}
		return nil
	}
}

// shutdownCause logs why the server stops and returns the error it exits
// with: nil after a signal.
func shutdownCause(log logr.Logger, lost func() error) error {
	if err := lost(); err != nil {
		log.Error(err, "shutting down")
		return err
	}
	log.Info("signal received, shutting down")
	return nil
}

// startWeb serves the web client where l says: with the control plane's own
// credential for the machine's owner, or with each person's own after their
// sign-in. The client is a companion, not a dependency: when it cannot
// listen, the server says why and goes on. It returns the stop, or nil.
func startWeb(cp *controlplane.ControlPlane, layout home.Layout, l webui.Listen, log logr.Logger) func(context.Context) {
	log = log.WithName("web")
	files, built := web.App()
	if !built {
		log.Info("this binary was built without the web client: the page says so; build it with 'make build'")
	}
	if l.ForcedSignIn != "" {
		log.Info("people sign in to the web client: " + l.ForcedSignIn + ", and it must not act with the server's credential for them")
	}
	allowed := webui.ParseAllowedHosts(os.Getenv(webui.EnvAllowedHosts))
	var tlsConfig *tls.Config
	var err error
	if l.TLS {
		tlsConfig, err = webTLS(layout, l.Address, allowed)
	}
	var h http.Handler
	if err == nil {
		h, err = webui.NewHandler(webui.Options{
			Upstream:     cp.Config,
			DotsAPI:      cp.DotsAPIConfig(),
			Files:        files,
			AllowedHosts: allowed,
			Address:      l.Address,
			SignIn:       l.SignIn,
			Secure:       l.TLS,
			Log:          log,
		})
	}
	if err == nil {
		var srv *webui.Server
		if srv, err = webui.Start(l.Address, h, tlsConfig, log); err == nil {
			log.Info("web client ready", "address", l.URL(), "signIn", l.SignIn)
			published := layout.WebAddress()
			if err := webui.Publish(published, webui.Published{URL: l.URL(), SignIn: l.SignIn}); err != nil {
				log.Error(err, "could not write where the web client is; 'invisible-dots user add' will not say it", "file", published)
			}
			return func(ctx context.Context) {
				_ = os.Remove(published)
				srv.Stop(ctx)
			}
		}
	}
	log.Error(err, "the web client is not served; the API and kubectl work without it")
	return nil
}

// webTLS is the web client's TLS: a serving certificate of the server's CA
// (the CA of its kubeconfig, pki/ca.crt) for the address it listens on
// (every address of the machine for 0.0.0.0 or ::), the machine's name and
// the allowed host names.
func webTLS(layout home.Layout, addr string, allowed []string) (*tls.Config, error) {
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if ip.IsUnspecified() {
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return nil, fmt.Errorf("list this machine's addresses for the web client's certificate: %w", err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				ips = append(ips, n.IP)
			}
		}
	} else {
		ips = append(ips, ip)
	}
	names := append([]string{"localhost"}, allowed...)
	if hn, err := os.Hostname(); err == nil && hn != "" {
		names = append(names, strings.ToLower(hn))
	}
	pki := apiserver.PKI{Dir: layout.PKI()}
	if err := pki.EnsureWebServing(ips, names); err != nil {
		return nil, fmt.Errorf("make the web client's certificate: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(pki.WebCert(), pki.WebKey())
	if err != nil {
		return nil, fmt.Errorf("read the web client's certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// apiStoppedOrNever is apiStopped, or a channel that never closes.
func apiStoppedOrNever(cp *controlplane.ControlPlane) <-chan struct{} {
	if c := apiStopped(cp); c != nil {
		return c
	}
	return make(chan struct{})
}

// apiStopped is closed when the embedded API server stops by itself, so the
// controllers stop with it instead of retrying against nothing.
func apiStopped(cp *controlplane.ControlPlane) <-chan struct{} {
	if cp.API == nil {
		return nil
	}
	return cp.API.Done()
}

func newKubeconfigCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the admin kubeconfig the server wrote (for kubectl --kubeconfig or KUBECONFIG)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			layout, err := home.FromEnv()
			if err != nil {
				return err
			}
			data, err := os.ReadFile(layout.Kubeconfig())
			if err != nil {
				return fmt.Errorf("no kubeconfig at %s: start the server once with 'invisible-dots server' (%w)", layout.Kubeconfig(), err)
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
}
