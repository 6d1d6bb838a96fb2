package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/invisible-dots/invisible-dots/controllers"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Environment variables the server reads.
const (
	envListen      = "INVISIBLE_DOTS_LISTEN"
	envDatabaseURL = "DATABASE_URL"
)

func newServerCommand() *cobra.Command {
	var (
		noWeb      bool
		kubeconfig string
		verbosity  int
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane in the foreground: PostgreSQL, the API server, the controllers",
		Long: `server runs everything in one process until Ctrl-C (SIGINT), SIGTERM or SIGHUP:
a managed PostgreSQL (or DATABASE_URL), the Kubernetes API server on
INVISIBLE_DOTS_LISTEN (default 127.0.0.1:8787), the CRDs, and the controllers.
It writes $INVISIBLE_DOTS_HOME/kubeconfig for kubectl:

  export KUBECONFIG=~/.invisible-dots/kubeconfig
  kubectl get dots`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(verbosity)
			ctrl.SetLogger(log)
			h, err := home.FromEnv()
			if err != nil {
				return err
			}
			listen := os.Getenv(envListen)
			if listen == "" {
				listen = controlplane.DefaultListenAddress
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()

			if noWeb {
				log.V(1).Info("the web client is off (--no-web)")
			} else {
				log.Info("the web client is not built yet in this version; serving the API only")
			}
			cp, err := controlplane.Start(ctx, controlplane.Options{
				Home:               h,
				ListenAddress:      listen,
				DatabaseURL:        os.Getenv(envDatabaseURL),
				ExternalKubeconfig: kubeconfig,
				Log:                log,
			})
			if err != nil {
				return err
			}
			defer func() {
				log.Info("stopping the control plane")
				cp.Stop(context.WithoutCancel(ctx))
				log.Info("stopped")
			}()
			if cp.KubeconfigPath != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "\ninvisible-dots is ready. Use it with:\n  export KUBECONFIG=%s\n  kubectl get dots\n\n", cp.KubeconfigPath)
			}
			// This host's VMs run through the QEMU driver; without QEMU the
			// server still serves, and each Computer says no host agent runs.
			var vmDriver driver.Driver
			if d, err := qemu.New(ctx, qemu.Options{Home: h}); err != nil {
				log.Error(err, "this host cannot run VMs: Computers stay PROVISIONING; run invisible-dots setup (invisible-dots doctor shows what is missing)")
			} else {
				vmDriver = d
			}
			err = controllers.Run(ctx, controllers.Options{
				Config:     cp.Config,
				Home:       h,
				DB:         cp.DB,
				Driver:     vmDriver,
				Log:        log.WithName("controllers"),
				APIStopped: apiStopped(cp),
			})
			if err != nil && ctx.Err() == nil {
				return err
			}
			log.Info("signal received, shutting down")
			return nil
		},
	}
	cmd.Flags().BoolVar(&noWeb, "no-web", false, "do not serve the web client")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "run the controllers against the cluster of this kubeconfig instead of the embedded API server")
	cmd.Flags().IntVarP(&verbosity, "v", "v", 0, "log verbosity (0 = events only)")
	return cmd
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
			h, err := home.FromEnv()
			if err != nil {
				return err
			}
			data, err := os.ReadFile(h.Kubeconfig())
			if err != nil {
				return fmt.Errorf("no kubeconfig at %s: start the server once with 'invisible-dots server' (%w)", h.Kubeconfig(), err)
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
}
