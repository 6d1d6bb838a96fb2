package setup

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"syscall"

	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// The hidden flags of image build that its elevated run is given: the
// person's home (sudo drops INVISIBLE_DOTS_HOME and sets HOME to root's) and
// the guest binaries the person built with their own Go (root's PATH under
// sudo need not hold go, nor its cache the modules).
const (
	FlagForHome = "for-home"
	FlagAgentd  = "agentd"
	FlagEngine  = "engine"
)

// ImageBuildCommand is the command that builds the images.
const ImageBuildCommand = "invisible-dots image build"

// SudoImageBuild is the command line that runs image build as root for the
// person: exe (this binary, by absolute path) under sudo, with the person's
// home, the checkout, the work directory when one was given, and the guest
// binaries already built.
func SudoImageBuild(exe string, p home.Person, repo, work, agentd, engine string) []string {
	argv := []string{"sudo", exe, "image", "build", "--" + FlagForHome, p.Home.Root, "--repo", repo}
	if work != "" {
		argv = append(argv, "--work", work)
	}
	if agentd != "" && engine != "" {
		argv = append(argv, "--"+FlagAgentd, agentd, "--"+FlagEngine, engine)
	}
	return argv
}

// ImagesDone says whether image build has nothing left to do that can be
// told cheaply: a full golden image (kind golden, with the desktop) is
// registered, and a runtime ISO built from the guest binaries whose sum is
// runtimeSum (runtimeiso.Sum). image build itself would then only find both
// registered; a golden image whose apt inputs moved on is taken by running
// image build, not setup --all.
func ImagesDone(h home.Layout, runtimeSum string) (string, bool) {
	g, ok := images.LatestDesktop(h)
	if !ok {
		return "no golden image with the desktop in " + h.Images(), false
	}
	m, ok := images.FindBuilt(h, home.Runtime, runtimeSum)
	if !ok {
		return "no runtime ISO of this checkout's dot-agentd and engine in " + h.Images(), false
	}
	return fmt.Sprintf("golden image %s, runtime ISO %s", g.Version, m.Version), true
}

// RunElevated runs argv (a sudo command line) with the person's terminal as
// its input and out as its output, and waits for it. A cancelled ctx sends
// sudo SIGTERM, which sudo passes on to the command (a Ctrl-C at the
// terminal reaches both already), and waits for the command to stop: sudo
// is never killed, or the command would go on without it.
func RunElevated(ctx context.Context, argv []string, in io.Reader, out io.Writer) error {
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = in, out, out
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	return c.Run()
}
