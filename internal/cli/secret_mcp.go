package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// maxMCPSecretBytes bounds what is read for one MCP secret.
const maxMCPSecretBytes = 64 << 10

// newSecretMCPCommand is `invisible-dots secret mcp DOT [SERVER NAME]`: the
// secrets of the MCP servers a Dot declares, through the Dots API (so a
// person with dots-editor in the namespace may set them, and the running
// guest gets them at once).
func newSecretMCPCommand() *cobra.Command {
	var (
		cn    conn
		clear bool
	)
	cmd := &cobra.Command{
		Use:   "mcp DOT [SERVER NAME] [--clear]",
		Short: "List a Dot's MCP secrets, or set one (its value read from standard input), or clear it",
		Long: `mcp DOT lists the secrets the Dot's MCP servers name and whether each is
set (never a value). mcp DOT SERVER NAME sets one, its value read from
standard input, never from an argument (on a terminal it is asked for
without echo); --clear clears it. A running Dot's guest gets the change at
once.

  invisible-dots secret mcp fare-watch
  printf '%s' "$TIME_API_KEY" | invisible-dots secret mcp fare-watch time TIME_API_KEY
  invisible-dots secret mcp fare-watch time TIME_API_KEY --clear`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 && len(args) != 3 {
				return errors.New("give the Dot alone (to list its secrets), or the Dot, the server and the secret's name (the value comes from standard input)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			ctx, out, dot := cmd.Context(), cmd.OutOrStdout(), args[0]
			if len(args) == 1 {
				list, err := c.dots.MCPSecrets(ctx, c.ns, dot)
				if err != nil {
					return err
				}
				if len(list.Secrets) == 0 {
					fmt.Fprintf(out, "Dot %s/%s declares no MCP secret\n", c.ns, dot)
					return nil
				}
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "SERVER\tNAME\tSET")
				for _, s := range list.Secrets {
					fmt.Fprintf(w, "%s\t%s\t%v\n", s.Server, s.Name, s.Set)
				}
				return w.Flush()
			}
			server, name := args[1], args[2]
			if clear {
				if err := c.dots.ClearMCPSecret(ctx, c.ns, dot, server, name); err != nil {
					return err
				}
				fmt.Fprintf(out, "cleared %s of MCP server %s of Dot %s/%s\n", name, server, c.ns, dot)
				return nil
			}
			value, err := readSecretValue(cmd.InOrStdin(), cmd.ErrOrStderr(), name, "invisible-dots secret mcp DOT SERVER NAME")
			if err != nil {
				return err
			}
			if _, err := c.dots.SetMCPSecret(ctx, c.ns, dot, server, name, value); err != nil {
				return err
			}
			fmt.Fprintf(out, "set %s of MCP server %s of Dot %s/%s\n", name, server, c.ns, dot)
			return nil
		},
	}
	addConnFlags(cmd.Flags(), &cn)
	cmd.Flags().BoolVar(&clear, "clear", false, "clear the secret instead of setting it")
	return cmd
}

// readSecretValue reads a secret's value: from a terminal without echo,
// after a prompt on errOut; from anything else as it comes, less one final
// line end. command is the command line that reads it, for the hint.
func readSecretValue(in io.Reader, errOut io.Writer, name, command string) (string, error) {
	var b []byte
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(errOut, "%s (not shown): ", name)
		v, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(errOut)
		if err != nil {
			return "", fmt.Errorf("read the value from the terminal: %w", err)
		}
		b = v
	} else {
		v, err := io.ReadAll(io.LimitReader(in, maxMCPSecretBytes+1))
		if err != nil {
			return "", fmt.Errorf("read the value from standard input: %w", err)
		}
		if len(v) > maxMCPSecretBytes {
			return "", fmt.Errorf("standard input holds more than %d bytes, too much for a secret", maxMCPSecretBytes)
		}
		b = v
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) == 0 {
		return "", fmt.Errorf("no value was read: pipe it in, as printf '%%s' \"$VALUE\" | %s", command)
	}
	return string(b), nil
}
