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
Under a row that is not ok, "fix:" is the command that fixes it, one line to paste into a
shell as it is, and "why:" what that command does and what else to do (--json: "fix" and
"fixWhy").
It changes nothing. Exit code 0 only when every check is ok, 1 when a check is missing
or failed, 2 when none is but a check warns (accelerator tcg, the server not running);
--json says the same in "ready" and "exitCode".`,
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
			switch rep.ExitCode {
			case doctor.ExitNotOK:
				return &exitError{code: rep.ExitCode, err: errors.New("some checks are missing or failed: run their fix commands, or invisible-dots setup")}
			case doctor.ExitWarnings:
				return &exitError{code: rep.ExitCode, err: errors.New("nothing is missing, but some checks warn (exit code 2): see their lines")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
