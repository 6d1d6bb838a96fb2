package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// newBrowserCommand is `invisible-dots browser ls|create|close|rm|frame`: a
// Dot's browser identities (ref 6), as its engine keeps them. Only the Dot's
// own tools open a browser; a person may look at an open one, close it or
// delete it.
func newBrowserCommand() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "browser",
		Short: "List, create, close and delete a Dot's browser identities, and save a frame of an open one, while its computer runs",
	}
	addConnFlags(cmd.PersistentFlags(), &cn)
	cmd.AddCommand(&cobra.Command{
		Use:   "ls DOT",
		Short: "List the Dot's browser identities, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			list, err := c.dots.BrowserIdentities(cmd.Context(), c.ns, args[0])
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tOPEN\tPROXY\tCREATED\tLAST USED")
			for _, id := range list.Identities {
				lastUsed := "-"
				if id.LastUsedAtMS != nil {
					lastUsed = msTime(*id.LastUsedAtMS)
				}
				fmt.Fprintf(w, "%s\t%s\t%v\t%v\t%s\t%s\n", id.ID, id.Name, id.Open, id.HasProxy, msTime(id.CreatedAtMS), lastUsed)
			}
			return w.Flush()
		},
	})
	var withProxy bool
	create := &cobra.Command{
		Use:   "create DOT NAME [--proxy]",
		Short: "Create a browser identity; with --proxy its proxy is read from standard input, never from an argument",
		Long: `create DOT NAME creates a browser identity with no proxy of its own: its
browser goes out the way the Dot's computer does, the normal case. --proxy
gives it a proxy, read from standard input (on a terminal it is asked for
without echo), never from an argument; it is kept as a secret, handed to the
browser as written, and never shown again.

  invisible-dots browser create fare-watch shopping
  printf '%s' "$PROXY_URL" | invisible-dots browser create fare-watch shopping --proxy`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			in := protocol.BrowserIdentityCreate{Name: args[1]}
			if withProxy {
				proxy, err := readSecretValue(cmd.InOrStdin(), cmd.ErrOrStderr(), "proxy", "invisible-dots browser create DOT NAME --proxy")
				if err != nil {
					return err
				}
				in.Proxy = &proxy
			}
			id, err := c.dots.CreateBrowserIdentity(cmd.Context(), c.ns, args[0], in)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created browser identity %s (%s) of Dot %s/%s\n", id.ID, id.Name, c.ns, args[0])
			return nil
		},
	}
	create.Flags().BoolVar(&withProxy, "proxy", false, "read the identity's proxy from standard input")
	cmd.AddCommand(create)
	cmd.AddCommand(&cobra.Command{
		Use:   "close DOT ID",
		Short: "Close the identity's browser; its profile (cookies, logins) stays",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			if err := c.dots.CloseBrowserIdentity(cmd.Context(), c.ns, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "closed browser identity %s of Dot %s/%s\n", args[1], c.ns, args[0])
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "rm DOT ID",
		Short: "Delete the identity: its browser is closed and its profile removed",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			if err := c.dots.DeleteBrowserIdentity(cmd.Context(), c.ns, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted browser identity %s of Dot %s/%s\n", args[1], c.ns, args[0])
			return nil
		},
	})
	var output string
	frame := &cobra.Command{
		Use:   "frame DOT ID -o FILE.jpg",
		Short: "Save one frame of an open identity's window (JPEG)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output == "" {
				return fmt.Errorf("-o FILE.jpg is required: a JPEG is not for a terminal")
			}
			c, err := cn.clients()
			if err != nil {
				return err
			}
			jpeg, err := c.dots.BrowserFrame(cmd.Context(), c.ns, args[0], args[1])
			if err != nil {
				return err
			}
			if err := writeOut(cmd.OutOrStdout(), output, jpeg); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d bytes)\n", output, len(jpeg))
			return nil
		},
	}
	frame.Flags().StringVarP(&output, "output", "o", "", "the JPEG file to write (required)")
	cmd.AddCommand(frame)
	return cmd
}

// msTime shows milliseconds since the epoch as a UTC time.
func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}
