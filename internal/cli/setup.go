package cli

import (
	"github.com/spf13/cobra"

	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/hostagent/setup"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

func newSetupCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "setup",
		Short: "Get QEMU, its accelerator and PostgreSQL ready on this host (runs doctor, then fixes what is missing)",
		Long: `setup runs doctor, then installs what is missing with apt-get (qemu-system-x86, qemu-utils,
postgresql; directly as root, through sudo otherwise), prints the kvm group line when /dev/kvm
is not accessible, and records the CPU model in $INVISIBLE_DOTS_HOME/config/host.yaml when the
accelerator probe needs the override. It can be run again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := home.FromEnv()
			if err != nil {
				return err
			}
			_, err = setup.Run(cmd.Context(), setup.Real(doctor.Real(h), cmd.OutOrStdout()))
			return err
		},
	}
}
