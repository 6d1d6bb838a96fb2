// Package cli holds the cobra commands of the invisible-dots binary. Commands
// are wiring only: each one parses its flags and calls the package that does
// the work.
package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/version"
)

// subcommands lists the constructors of every top-level command. A new command
// adds one line here.
var subcommands = []func() *cobra.Command{
	newServerCommand,
	newAgentCommand,
	newHostCommand,
	newUserCommand,
	newKubeconfigCommand,
	newDoctorCommand,
	newSetupCommand,
	newComputerCommand,
	newTaskCommand,
	newChannelCommand,
	newWebhookCommand,
	newQuotaCommand,
	newChatCommand,
	newLogsCommand,
	newStatusCommand,
	newFilesCommand,
	newScreenshotCommand,
	newBrowserCommand,
	func() *cobra.Command { return newDecisionCommand(dotsv1.Approve) },
	func() *cobra.Command { return newDecisionCommand(dotsv1.Reject) },
	newSecretCommand,
	newImageCommand,
	newVersionCommand,
}

// PluginName is the name the binary answers to as a kubectl plugin: kubectl
// runs kubectl-dots for `kubectl dots ...`, with kubectl's own flags
// (--kubeconfig, --context, -n) passed on as arguments, which the person's
// commands take.
const PluginName = "kubectl-dots"

// NewRootCommand builds the invisible-dots command tree.
func NewRootCommand() *cobra.Command {
	dropUpstreamVersionFlag()
	root := &cobra.Command{
		Use:           "invisible-dots",
		Short:         "Persistent AI agents, each with a computer of its own, managed as Kubernetes resources",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what the version command prints.
		Version: version.Version,
	}
	root.SetVersionTemplate("invisible-dots {{.Version}}\n")
	// Without cobra's -v shorthand, which is the log verbosity of server
	// and agent.
	root.Flags().Bool("version", false, "print this build's version (invisible-dots version --output json: the build's details)")
	if filepath.Base(os.Args[0]) == PluginName {
		root.Use = "dots"
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl dots"}
	}
	for _, sub := range subcommands {
		root.AddCommand(sub())
	}
	return root
}

// Execute runs the command line and returns the process exit code.
func Execute() int {
	if err := NewRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var coded *exitError
		if errors.As(err, &coded) {
			return coded.code
		}
		return 1
	}
	return 0
}
