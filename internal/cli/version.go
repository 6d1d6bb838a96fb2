package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	kubeversion "k8s.io/component-base/version"

	"github.com/invisible-dots/invisible-dots/internal/version"
)

// buildInfo is what `version --output json` prints, kubectl-style.
type buildInfo struct {
	Version    string `json:"version"`
	Kubernetes string `json:"kubernetesVersion"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
	Commit     string `json:"gitCommit,omitempty"`
	Modified   bool   `json:"gitTreeModified,omitempty"`
	BuildDate  string `json:"buildDate,omitempty"`
}

func currentBuild() buildInfo {
	b := buildInfo{
		Version:    version.Version,
		Kubernetes: kubeversion.Get().GitVersion,
		GoVersion:  runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			case "vcs.time":
				b.BuildDate = s.Value
			}
		}
	}
	return b
}

// Notices are the third-party notices the binary embeds (main.go), printed
// by `version --notices`.
var Notices string

func newVersionCommand() *cobra.Command {
	var output string
	var notices bool
	cmd := &cobra.Command{
		Use:   "version [--output json] [--notices]",
		Short: "Print this build's version (with --output json, the build's details; with --notices, the third-party notices)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if notices {
				if Notices == "" {
					return fmt.Errorf("this build carries no third-party notices: it was not built from the repository's main package")
				}
				_, err := io.WriteString(cmd.OutOrStdout(), Notices)
				return err
			}
			return printVersion(cmd.OutOrStdout(), output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json for the build's details (its Kubernetes and Go versions, platform, commit)")
	cmd.Flags().BoolVar(&notices, "notices", false, "print the licenses and notices of the third-party code this binary holds (THIRD_PARTY_NOTICES.md)")
	return cmd
}

func printVersion(w io.Writer, output string) error {
	b := currentBuild()
	switch output {
	case "":
		_, err := fmt.Fprintf(w, "invisible-dots %s\n", b.Version)
		return err
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(b)
	default:
		return fmt.Errorf("--output %q: the only output is json (or none, for the version alone)", output)
	}
}

// dropUpstreamVersionFlag takes the embedded API server's global --version
// flag ("--version=vX.Y.Z... sets the reported version") off the command
// line cobra merges into every command, so --version is this product's.
func dropUpstreamVersionFlag() {
	if pflag.CommandLine.Lookup("version") == nil {
		return
	}
	fs := pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)
	pflag.CommandLine.VisitAll(func(f *pflag.Flag) {
		if f.Name != "version" {
			fs.AddFlag(f)
		}
	})
	pflag.CommandLine = fs
}
