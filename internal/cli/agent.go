package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/agent"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/pidlock"
)

func newAgentCommand() *cobra.Command {
	var (
		kubeconfig     string
		hostName       string
		verbosity      int
		guestListen    string
		guestAdvertise string
	)
	cmd := &cobra.Command{
		Use:   "agent --kubeconfig FILE [--host NAME]",
		Short: "Run a host agent alone: this machine's VMs, for a control plane elsewhere",
		Long: `agent runs the host agent of one machine until Ctrl-C (SIGINT), SIGTERM or
SIGHUP: it registers its Host (--host, by default the machine's host name),
renews its Lease, and runs the VMs of the Computers placed on it, in
$INVISIBLE_DOTS_HOME. It talks to the API server of --kubeconfig alone
(the embedded one of an invisible-dots server over HTTPS, or a real
cluster); make that kubeconfig on the server's machine with

  invisible-dots host join --name NAME > host.kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(verbosity)
			ctrl.SetLogger(log)
			if kubeconfig == "" {
				return fmt.Errorf("--kubeconfig is required: make one with 'invisible-dots host join --name NAME' on the server's machine")
			}
			layout, err := home.FromEnv()
			if err != nil {
				return err
			}
			if hostName == "" {
				if hostName, err = agent.DefaultHostName(); err != nil {
					return err
				}
			} else if err := agent.ValidateHostName(hostName); err != nil {
				return err
			}
			if err := layout.Ensure(); err != nil {
				return fmt.Errorf("prepare the home %s: %w", layout.Root, err)
			}
			// One set of hands on a home's VMs: an agent and a server (which
			// runs one too) never share a home.
			lock, err := pidlock.Acquire(layout.ServerLock(), pidlock.Options{})
			if err != nil {
				return fmt.Errorf("another invisible-dots server or agent may be using %s: %w", layout.Root, err)
			}
			defer func() { _ = lock.Release() }()
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("read --kubeconfig %s: %w", kubeconfig, err)
			}
			cfg.QPS, cfg.Burst = 50, 100
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			// The control plane reaches this host's guests through the
			// agent's endpoint, at the address it publishes on its Host.
			mgr, err := newHostAgent(ctx, cfg, layout, hostName, guestEndpoint{listen: guestListen, advertise: guestAdvertise}, log)
			if err != nil {
				return err
			}
			log.Info("host agent starting", "host", hostName, "home", layout.Root, "api", cfg.Host)
			err = runManagers(ctx, nil, log, mgr)
			if err != nil && ctx.Err() == nil {
				return err
			}
			log.Info("signal received, shutting down")
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "the kubeconfig of the API server (from 'invisible-dots host join')")
	cmd.Flags().StringVar(&hostName, "host", os.Getenv(envHost), "the name of this machine's Host (default: $"+envHost+", else the machine's host name)")
	cmd.Flags().IntVarP(&verbosity, "v", "v", 0, "log verbosity (0 = events only)")
	cmd.Flags().StringVar(&guestListen, "guest-listen", agent.DefaultGuestListen, "where the agent serves its guests to the control plane (HTTPS, the control plane's identity only); on another machine than the server, an address the server reaches, such as 0.0.0.0:10250")
	cmd.Flags().StringVar(&guestAdvertise, "guest-advertise", "", "the name or address the server reaches this machine at (default: the --guest-listen address; required when it is 0.0.0.0 or ::)")
	return cmd
}

// guestEndpoint is where a host agent serves its guests (agent.Options
// GuestListen and GuestAdvertise).
type guestEndpoint struct{ listen, advertise string }

// newHostAgent builds the host agent of this machine: the QEMU driver when
// QEMU is usable here, and the agent's manager either way (a host that
// cannot run VMs says so on its Host and on the Computers placed on it).
// Its guests are served to the control plane at ep.
func newHostAgent(ctx context.Context, cfg *rest.Config, layout home.Layout, hostName string, ep guestEndpoint, log logr.Logger) (ctrl.Manager, error) {
	o := agent.Options{Config: cfg, HostName: hostName, Home: layout, GuestListen: ep.listen, GuestAdvertise: ep.advertise, Log: log.WithName("agent")}
	if hc, err := hostconfig.Load(layout); err == nil {
		o.WakeLead = hc.EffectiveWakeLead()
	}
	if d, err := qemu.New(ctx, qemu.Options{Home: layout}); err != nil {
		log.Error(err, "this host cannot run VMs: its Computers stay PROVISIONING; run invisible-dots setup (invisible-dots doctor shows what is missing)")
		o.DriverProblem = err
	} else {
		o.Driver = d
		o.Accelerator = dotsv1.Accelerator(d.Accelerator())
		o.QEMUVersion = d.QEMUVersion()
	}
	return agent.NewManager(o)
}

// runManagers runs managers side by side until ctx ends, one of them fails,
// or stopped closes (the embedded API server went away); then all stop.
func runManagers(ctx context.Context, stopped <-chan struct{}, log logr.Logger, mgrs ...ctrl.Manager) error {
	g, ctx := errgroup.WithContext(ctx)
	if stopped != nil {
		g.Go(func() error {
			select {
			case <-stopped:
				return fmt.Errorf("the API server stopped")
			case <-ctx.Done():
				return nil
			}
		})
	}
	for _, m := range mgrs {
		g.Go(func() error { return m.Start(ctx) })
	}
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		// Each manager waits up to its graceful shutdown timeout for its
		// reconciles; one that has not returned well after that must not
		// keep the process (and its database) from stopping.
		select {
		case err = <-done:
		case <-time.After(managersStopTimeout):
			err = fmt.Errorf("a controller manager did not stop within %s of the stop; stopping without it (its goroutines follow on standard error)", managersStopTimeout)
			// What it waits on, for whoever reads the log.
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		}
	}
	if err != nil {
		log.Error(err, "stopping")
	}
	return err
}

// managersStopTimeout bounds the wait for the managers at a stop: their own
// graceful shutdown (10 s) and some.
const managersStopTimeout = 15 * time.Second
