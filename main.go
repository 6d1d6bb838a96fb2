// Command invisible-dots runs the control plane for persistent AI agents that
// each own a virtual machine, managed as Kubernetes resources.
package main

import (
	_ "embed"
	"os"

	"github.com/invisible-dots/invisible-dots/internal/cli"
)

// notices are the third-party notices of what this binary holds
// (THIRD_PARTY_NOTICES.md, written by hack/notices from the module graph and
// the web client's lock file), which `invisible-dots version --notices`
// prints: a copy of the binary carries them.
//
//go:embed THIRD_PARTY_NOTICES.md
var notices string

func main() {
	cli.Notices = notices
	os.Exit(cli.Execute())
}
