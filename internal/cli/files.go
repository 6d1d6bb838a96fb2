package cli

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newFilesCommand() *cobra.Command {
	var cn conn
	cmd := &cobra.Command{
		Use:   "files",
		Short: "List and read the files of a Dot's home (/home/dot), while its computer runs",
	}
	addConnFlags(cmd.PersistentFlags(), &cn)
	cmd.AddCommand(&cobra.Command{
		Use:   "ls DOT [PATH]",
		Short: "List a directory of the Dot's home (PATH absolute, relative to the home, or ~/...; the home by default)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			p := ""
			if len(args) == 2 {
				p = args[1]
			}
			list, err := c.dots.ListFiles(cmd.Context(), c.ns, args[0], p)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "%s\n", list.Path)
			for _, e := range list.Entries {
				name := e.Name
				if e.Type == "dir" {
					name += "/"
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", name, e.Type, e.Size, e.Mtime)
			}
			return w.Flush()
		},
	})
	var output string
	get := &cobra.Command{
		Use:   "get DOT PATH [-o FILE]",
		Short: "Print a file of the Dot's home (at most 16 MiB), or write it to FILE",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cn.clients()
			if err != nil {
				return err
			}
			f, err := c.dots.ReadFile(cmd.Context(), c.ns, args[0], args[1])
			if err != nil {
				return err
			}
			return writeOut(cmd.OutOrStdout(), output, f.Data)
		},
	}
	get.Flags().StringVarP(&output, "output", "o", "", "write the file here instead of standard output")
	cmd.AddCommand(get)
	return cmd
}

func newScreenshotCommand() *cobra.Command {
	var (
		cn     conn
		output string
	)
	cmd := &cobra.Command{
		Use:   "screenshot DOT -o FILE.png",
		Short: "Save a picture of the Dot's desktop (PNG), while its computer runs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output == "" {
				return fmt.Errorf("-o FILE.png is required: a PNG is not for a terminal")
			}
			c, err := cn.clients()
			if err != nil {
				return err
			}
			png, err := c.dots.Screenshot(cmd.Context(), c.ns, args[0])
			if err != nil {
				return err
			}
			if err := writeOut(cmd.OutOrStdout(), output, png); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d bytes)\n", output, len(png))
			return nil
		},
	}
	addConnFlags(cmd.Flags(), &cn)
	cmd.Flags().StringVarP(&output, "output", "o", "", "the PNG file to write (required)")
	return cmd
}

// writeOut writes data to the file named output, or to out when it is empty
// or "-".
func writeOut(out io.Writer, output string, data []byte) error {
	if output == "" || output == "-" {
		_, err := out.Write(data)
		return err
	}
	if err := os.WriteFile(output, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", output, err)
	}
	return nil
}
