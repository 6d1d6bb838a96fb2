package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/controllers"
	"github.com/invisible-dots/invisible-dots/hostagent/agent"
	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
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
)

func newServerCommand() *cobra.Command {
	var (
		noWeb         bool
		kubeconfig    string
		hostName      string
		noControllers bool
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
off), which adds the API credential itself. It writes $INVISIBLE_DOTS_HOME/kubeconfig
for kubectl:

  export KUBECONFIG=~/.invisible-dots/kubeconfig
  kubectl get dots`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(verbosity)
			ctrl.SetLogger(log)
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
			webListen, err := webui.ParseListen(os.Getenv(webui.EnvListen))
			if err != nil {
				return err
			}
			cp, err := controlplane.Start(ctx, controlplane.Options{
				Home:               layout,
				ListenAddress:      listen,
				DatabaseURL:        os.Getenv(envDatabaseURL),
				ExternalKubeconfig: kubeconfig,
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
			} else if stopWeb := startWeb(cp, webListen, log); stopWeb != nil {
				defer stopWeb(context.WithoutCancel(ctx))
				webURL = "http://" + webListen
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
				Config:   cp.Config,
				Log:      log.WithName("controllers"),
				Embedded: kubeconfig == "",
				Store:    cp.Store(),
			})
			if err != nil {
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
	cmd.Flags().BoolVar(&noControllers, "no-controllers", false, "serve the API and its database alone: the central controllers (server --kubeconfig) and host agents (agent) run elsewhere")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "run the controllers against the cluster of this kubeconfig instead of the embedded API server")
	cmd.Flags().StringVar(&hostName, "host", os.Getenv(envHost), "the name of this machine's Host (default: $"+envHost+", else the machine's host name)")
	cmd.Flags().IntVarP(&verbosity, "v", "v", 0, "log verbosity (0 = events only)")
	return cmd
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

// startWeb serves the web client on addr with the control plane's own
// credential. The client is a companion, not a dependency: when it cannot
// listen, the server says why and goes on. It returns the stop, or nil.
func startWeb(cp *controlplane.ControlPlane, addr string, log logr.Logger) func(context.Context) {
	log = log.WithName("web")
	files, built := web.App()
	if !built {
		log.Info("this binary was built without the web client: the page says so; build it with 'make build'")
	}
	h, err := webui.NewHandler(webui.Options{
		Upstream:     cp.Config,
		DotsAPI:      cp.DotsAPIConfig(),
		Files:        files,
		AllowedHosts: webui.ParseAllowedHosts(os.Getenv(webui.EnvAllowedHosts)),
		Address:      addr,
		Log:          log,
	})
	if err == nil {
		var srv *webui.Server
		if srv, err = webui.Start(addr, h, log); err == nil {
			log.Info("web client ready", "address", "http://"+addr)
			return srv.Stop
		}
	}
	log.Error(err, "the web client is not served; the API and kubectl work without it")
	return nil
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
