package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

func newDoctorCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this host can run Dots; print one line per check and the command that fixes a failure",
		Long: `doctor checks QEMU (7.2 or newer), qemu-img, the accelerator (by running QEMU with the
Dots' machine, accelerator and CPU model), the home directory, the images, PostgreSQL
and the OpenRouter key stored (asked of the server this home runs).
It changes nothing. Exit code 0 when no check is missing or failed (warnings allowed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := home.FromEnv()
			if err != nil {
				return err
			}
			rep := doctor.Run(cmd.Context(), doctor.Real(h))
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				fmt.Fprint(out, doctor.Render(rep))
			}
			if !rep.OK {
				return &exitError{code: 1, err: errors.New("some checks are missing or failed: run the fix lines, or invisible-dots setup")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
