package cli

import (
	"cmp"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/invisible-dots/invisible-dots/hostagent/agent"
	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

func newHostCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Hosts: the machines that run Dots' computers",
	}
	cmd.AddCommand(newHostJoinCommand())
	return cmd
}

// adminKubeconfig reads an administrator's kubeconfig: the file given, or
// the home's, which the server wrote.
func adminKubeconfig(file string) (*clientcmdapi.Config, error) {
	if file == "" {
		layout, err := home.FromEnv()
		if err != nil {
			return nil, err
		}
		file = layout.Kubeconfig()
	}
	admin, err := clientcmd.LoadFromFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the admin kubeconfig %s (start the server once, or pass --kubeconfig): %w", file, err)
	}
	return admin, nil
}

// writeCredential writes a kubeconfig made for someone to output (mode
// 0600), or to standard output when output is empty, and says note on
// standard error.
func writeCredential(cmd *cobra.Command, output string, data []byte, note string) error {
	if output == "" {
		fmt.Fprintln(cmd.ErrOrStderr(), note)
		_, err := cmd.OutOrStdout().Write(data)
		return err
	}
	if err := os.WriteFile(output, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", output, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s; %s\n", output, note)
	return nil
}

func newHostJoinCommand() *cobra.Command {
	var (
		name       string
		kubeconfig string
		output     string
		ttl        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "join --name NAME [--output FILE]",
		Short: "Print the kubeconfig a host agent runs with: a credential of its own for the Host NAME",
		Long: `join makes the credential of one host's agent (a ServiceAccount bound to the
invisible-dots-host-agent role, not an administrator) and prints the
kubeconfig to run it with, on that machine:

  invisible-dots host join --name gpu-box --output gpu-box.kubeconfig
  # copy the file to the machine, then there (ADDRESS: where the server
  # reaches that machine; the agent serves its guests there to the server alone):
  invisible-dots agent --kubeconfig gpu-box.kubeconfig --host gpu-box \
    --guest-listen 0.0.0.0:10250 --guest-advertise ADDRESS

It uses the admin kubeconfig of this home's server, or --kubeconfig.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				n, err := agent.DefaultHostName()
				if err != nil {
					return err
				}
				name = n
			}
			if err := agent.ValidateHostName(name); err != nil {
				return err
			}
			admin, err := adminKubeconfig(kubeconfig)
			if err != nil {
				return err
			}
			data, err := controlplane.JoinHost(cmd.Context(), *admin, name, ttl)
			if err != nil {
				return err
			}
			return writeCredential(cmd, output, data, fmt.Sprintf("on the host run (ADDRESS: where the server reaches it):\n  invisible-dots agent --kubeconfig %s --host %s --guest-listen 0.0.0.0:10250 --guest-advertise ADDRESS", cmp.Or(output, "FILE"), name))
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the Host's name, a DNS label (default: this machine's host name)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "an administrator's kubeconfig (default: the home's)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the kubeconfig to this file (mode 0600) instead of standard output")
	cmd.Flags().DurationVar(&ttl, "ttl", 365*24*time.Hour, "how long the credential is valid; join again to renew it")
	return cmd
}
