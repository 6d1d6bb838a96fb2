// Command invisible-dots runs the control plane for persistent AI agents that
// each own a virtual machine, managed as Kubernetes resources.
package main

import (
	"os"

	"github.com/invisible-dots/invisible-dots/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
