package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/types"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
)

// newSecretCommand is `invisible-dots secret openrouter [--dot NAME [-n NS]]`:
// it stores the OpenRouter key, read from standard input only, where the
// host agents push it from (internal/keystore does the work).
func newSecretCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Store a secret a Dot needs (the OpenRouter key, its MCP servers' secrets)",
	}
	cmd.AddCommand(newSecretMCPCommand())
	var dot, namespace string
	openrouter := &cobra.Command{
		Use:   "openrouter",
		Short: "Store the OpenRouter key, read from standard input, for every Dot or for one",
		Long: `openrouter reads the OpenRouter key from standard input, never from an argument (an
argument stays in the shell's history and in the process list). On a terminal it asks
for the key and does not echo it. The key must be printable ASCII without spaces.

Without --dot the key is the host-wide default, the key of every Dot that has none of
its own: the Secret ` + dotsv1.SystemNamespace + `/` + dotsv1.DefaultKeySecretName + `. With --dot NAME it is that Dot's own key, which
wins over the default, in the Secret its spec.secretRef names (made, and named there,
when the Dot has none). The host agents push it to each running Dot's computer.

  printf '%s' "$OPENROUTER_API_KEY" | invisible-dots secret openrouter
  invisible-dots secret openrouter --dot fare-watch -n team-a`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return errors.New("the key is read from standard input only, never from an argument (an argument stays in the shell's history and in the process list): printf '%s' \"$OPENROUTER_API_KEY\" | invisible-dots secret openrouter")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := readKey(cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			c, err := homeClient()
			if err != nil {
				return err
			}
			var stored keystore.Stored
			if dot == "" {
				if stored, err = keystore.StoreDefault(cmd.Context(), c, key); err != nil {
					return fmt.Errorf("store the default OpenRouter key: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "stored the OpenRouter key in Secret %s: every Dot without a key of its own uses it\n", stored.Secret)
				switch n, err := keystore.AnnounceDefault(cmd.Context(), c); {
				case err != nil:
					fmt.Fprintf(cmd.OutOrStdout(), "the running Dots could not be counted (%v): they get the key at their host agent's next poll\n", err)
				case n == 1:
					fmt.Fprintln(cmd.OutOrStdout(), "1 running Dot got the new key")
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "%d running Dots got the new key\n", n)
				}
				return nil
			}
			if stored, err = keystore.StoreForDot(cmd.Context(), c, types.NamespacedName{Namespace: namespace, Name: dot}, key); err != nil {
				return fmt.Errorf("store the OpenRouter key of Dot %s/%s: %w", namespace, dot, err)
			}
			note := ""
			if stored.RefSet {
				note = " (now named by its spec.secretRef)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stored the OpenRouter key of Dot %s/%s in Secret %s%s\n", namespace, dot, stored.Secret, note)
			return nil
		},
	}
	openrouter.Flags().StringVar(&dot, "dot", "", "store the key of this Dot alone (it wins over the host-wide default)")
	openrouter.Flags().StringVarP(&namespace, "namespace", "n", "default", "the Dot's namespace (with --dot)")
	cmd.AddCommand(openrouter)
	return cmd
}

// readKey reads the key: from a terminal without echo, after a prompt on
// errOut; from anything else as it comes.
func readKey(in io.Reader, errOut io.Writer) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(errOut, "OpenRouter key (not shown): ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(errOut)
		if err != nil {
			return "", fmt.Errorf("read the key from the terminal: %w", err)
		}
		return keystore.CheckKey(b)
	}
	return keystore.ReadKey(in)
}
