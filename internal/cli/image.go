package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/invisible-dots/invisible-dots/guest/image/golden"
	"github.com/invisible-dots/invisible-dots/guest/image/runtimeiso"
	"github.com/invisible-dots/invisible-dots/guest/image/testimage"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/hostagent/setup"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/pidlock"
)

func newImageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build and list the guest images of this host (the golden image, the runtime ISO)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newImageBuildCommand())
	return cmd
}

func newImageBuildCommand() *cobra.Command {
	var work, repo, forHome, agentd, engine string
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the golden image and the runtime ISO from Debian 12 packages and this checkout, and register them",
		Long: `image build builds the golden image (ref 3.3) without a builder VM: mmdebstrap installs
Debian 12 packages through this host's apt sources into a directory, provision.sh adds the
users, units and hardening of ref 4.1, mke2fs -d makes its file system and qemu-img the
qcow2 a Dot's disk sits on. It builds the runtime ISO (dot-agentd, the engine, their units)
from this checkout too, and registers both in $INVISIBLE_DOTS_HOME/images, where a new
Computer takes the newest golden image of this kind (the test image only where there is none).

The build needs root, mmdebstrap, e2fsprogs, qemu-utils and npm. Run it as the person who
runs the server: it builds the guest binaries with that person's Go, then runs itself again
under sudo (printing the command first) for the build, writing into that person's home.
Run under sudo, it writes into SUDO_USER's home and gives the files back to SUDO_USER.
A run whose inputs (the recipe, the apt sources and apt's Release files, the npm lock, our
binaries) are unchanged since the last registered build does nothing; run apt-get update
first to take newer packages. Downloaded packages are kept in --work for the next build.
Ctrl-C stops it and registers nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := personFor(forHome)
			if err != nil {
				return err
			}
			if p.Note != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), p.Note)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			if repo == "" {
				wd, _ := os.Getwd()
				if repo, err = testimage.FindRepo(wd); err != nil {
					return fmt.Errorf("the runtime ISO is built from this project's checkout: run image build inside it, or pass --repo: %w", err)
				}
			}
			if repo, err = filepath.Abs(repo); err != nil {
				return err
			}
			if work != "" {
				// The run under sudo is given it; make's is relative.
				if work, err = filepath.Abs(work); err != nil {
					return err
				}
			}
			if err := home.QEMUPathProblem(p.Home.Root); err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return imageBuildAsRoot(ctx, cmd.ErrOrStderr(), p, repo, work, guestBins{})
			}
			return imageBuild(ctx, cmd.ErrOrStderr(), p, repo, work, guestBins{agentd: agentd, engine: engine})
		},
	}
	cmd.Flags().StringVar(&work, "work", "", "cache of packages and scratch space (default $INVISIBLE_DOTS_HOME/images/.cache/golden)")
	cmd.Flags().StringVar(&repo, "repo", "", "this project's checkout, for the runtime ISO (default: found from the working directory)")
	// What the run under sudo is given by the run that started it.
	cmd.Flags().StringVar(&forHome, setup.FlagForHome, "", "the home of the person the build is for")
	cmd.Flags().StringVar(&agentd, setup.FlagAgentd, "", "dot-agentd, already built")
	cmd.Flags().StringVar(&engine, setup.FlagEngine, "", "dot-engine, already built")
	for _, f := range []string{setup.FlagForHome, setup.FlagAgentd, setup.FlagEngine} {
		_ = cmd.Flags().MarkHidden(f)
	}
	return cmd
}

// personFor is whom setup and image build act for (home.ForPerson), in the
// home forHome when one is given (the hidden flag the run under sudo gets).
func personFor(forHome string) (home.Person, error) {
	getenv := os.Getenv
	if forHome != "" {
		getenv = func(k string) string {
			if k == home.EnvHome {
				return forHome
			}
			return os.Getenv(k)
		}
	}
	return home.ForPerson(getenv, os.Geteuid(), user.Lookup)
}

// guestBins are dot-agentd and dot-engine already built (both, or neither:
// buildImages then builds them).
type guestBins struct{ agentd, engine string }

// buildGuestBins builds dot-agentd and dot-engine of the checkout into dir
// with the running user's Go.
func buildGuestBins(ctx context.Context, repo, dir string) (guestBins, error) {
	agentd, err := testimage.GoBuild(ctx, repo, "./guest/agentd/cmd/dot-agentd", filepath.Join(dir, "dot-agentd"))
	if err != nil {
		return guestBins{}, err
	}
	engine, err := testimage.GoBuild(ctx, repo, "./guest/engine/cmd/dot-engine", filepath.Join(dir, "dot-engine"))
	if err != nil {
		return guestBins{}, err
	}
	return guestBins{agentd: agentd, engine: engine}, nil
}

// runtimeSum is the runtime ISO's sum of the guest binaries (its version's
// digest).
func runtimeSum(b guestBins) (string, error) {
	files, err := runtimeiso.Contents(b.agentd, b.engine)
	if err != nil {
		return "", err
	}
	return runtimeiso.Sum(files), nil
}

// imageBuild builds the images as root for p, in p's home, and gives what
// it wrote back to p when p is another user (under sudo).
func imageBuild(ctx context.Context, errOut io.Writer, p home.Person, repo, work string, bins guestBins) error {
	h := p.Home
	if err := golden.Check(); err != nil {
		return err
	}
	if err := home.QEMUPathProblem(h.Root); err != nil {
		return err
	}
	if work == "" {
		work = filepath.Join(h.ImagesCache(), "golden")
	}
	err := buildImages(ctx, h, repo, work, bins, func(format string, args ...any) {
		fmt.Fprintf(errOut, format+"\n", args...)
	})
	// Whatever the outcome: the cache and anything registered are the
	// person's. A --work elsewhere is left as it is (it may be shared).
	if gerr := p.GiveBackImages(os.Lchown); gerr != nil {
		err = errors.Join(err, gerr)
	}
	return err
}

// imageBuildAsRoot runs this binary's image build under sudo for p (not
// root): the guest binaries are built first with p's own Go, then the
// command is printed and run, p's terminal its input and output. Ctrl-C
// reaches the build through sudo (the terminal's signal goes to both, and a
// SIGTERM sent to this process alone is passed on), which stops cleanly and
// registers nothing.
func imageBuildAsRoot(ctx context.Context, errOut io.Writer, p home.Person, repo, work string, bins guestBins) error {
	if _, err := exec.LookPath("sudo"); err != nil {
		return fmt.Errorf("the golden image build needs root and there is no sudo: run %s as root", setup.ImageBuildCommand)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to run it under sudo: %w", err)
	}
	if bins.agentd == "" {
		dir, err := os.MkdirTemp("", "invisible-dots-guest-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(errOut, "runtime ISO: building dot-agentd and the engine")
		if bins, err = buildGuestBins(ctx, repo, dir); err != nil {
			return err
		}
	}
	argv := setup.SudoImageBuild(exe, p, repo, work, bins.agentd, bins.engine)
	fmt.Fprintf(errOut, "the golden image build needs root:\n$ %s\n", strings.Join(argv, " "))
	err = setup.RunElevated(ctx, argv, os.Stdin, errOut)
	if ctx.Err() != nil {
		return &exitError{code: 130, err: errors.New("image build stopped: nothing was registered")}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// buildImages builds and registers the runtime ISO, then the golden image,
// under the home's golden build lock. Nothing is registered for a build
// that failed or was stopped: an image is registered by writing its manifest
// into images/ last (hostagent/images).
func buildImages(ctx context.Context, h home.Layout, repo, work string, bins guestBins, logf func(string, ...any)) error {
	start := time.Now()
	if err := os.MkdirAll(h.Images(), 0o755); err != nil {
		return fmt.Errorf("make %s: %w", h.Images(), err)
	}
	lock, err := pidlock.Acquire(h.GoldenBuildLock(), pidlock.Options{})
	if err != nil {
		return fmt.Errorf("another golden image build runs in this home: %w", err)
	}
	defer lock.Release()
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("make the work directory %s: %w", work, err)
	}
	out, err := os.MkdirTemp(work, "out-")
	if err != nil {
		return fmt.Errorf("make the output folder: %w", err)
	}
	defer os.RemoveAll(out)

	if bins.agentd == "" || bins.engine == "" {
		logf("runtime ISO: building dot-agentd and the engine")
		if bins, err = buildGuestBins(ctx, repo, filepath.Join(work, "bin")); err != nil {
			return err
		}
	}
	if err := buildRuntimeISO(ctx, h, filepath.Join(out, "runtime"), bins, logf); err != nil {
		return err
	}

	res, err := golden.Build(ctx, golden.Options{
		Out: filepath.Join(out, "golden"), Work: work, Log: logf,
		Registered: func(digest string) (protocol.ImageManifest, bool) {
			return images.FindBuilt(h, home.Golden, digest)
		},
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return &exitError{code: 130, err: errors.New("image build stopped: nothing was registered")}
		}
		return err
	}
	if res.ManifestPath != "" {
		if ctx.Err() != nil {
			return &exitError{code: 130, err: errors.New("image build stopped: nothing was registered")}
		}
		img, err := images.Register(h, res.ManifestPath)
		if err != nil {
			return err
		}
		logf("golden image %s registered: %s", img.Version, img.File)
	}
	logf("image build finished in %s", time.Since(start).Round(time.Second))
	logf("%s", runtimeRollout(h))
	return nil
}

// buildRuntimeISO builds and registers the runtime ISO of bins unless one of
// the same contents is registered, under the home's runtime build lock, which
// every builder of a runtime ISO takes (this one and the test image's, ref
// 3.2): two builds at once wait for each other instead of both registering.
func buildRuntimeISO(ctx context.Context, h home.Layout, out string, bins guestBins, logf func(string, ...any)) error {
	files, err := runtimeiso.Contents(bins.agentd, bins.engine)
	if err != nil {
		return err
	}
	lock, err := images.LockRuntimeBuild(ctx, h, logf)
	if err != nil {
		return err
	}
	defer lock.Release()
	if m, ok := images.FindBuilt(h, home.Runtime, runtimeiso.Sum(files)); ok {
		logf("runtime ISO %s already registered", m.Version)
		return nil
	}
	mp, m, err := runtimeiso.Build(out, files, time.Now())
	if err != nil {
		return err
	}
	if _, err := images.Register(h, mp); err != nil {
		return err
	}
	logf("runtime ISO %s registered", m.Version)
	return nil
}

// runtimeRollout says how many of the home's running VMs run an older
// runtime ISO than the newest registered: each takes it at its next start
// (ref 3.3), and a reboot applies it now.
func runtimeRollout(h home.Layout) string {
	newest, err := images.Latest(h, home.Runtime)
	if err != nil {
		return "the running Dots could not be compared with the newest runtime ISO: " + err.Error()
	}
	inUse, err := qemu.RuntimesInUse(h)
	if err != nil {
		return "the running Dots could not be read: " + err.Error()
	}
	return rolloutText(newest.Version, inUse)
}

// rolloutText says which of the running VMs (their runtime ISO versions by
// VM) wait for the runtime ISO newest.
func rolloutText(newest string, inUse map[home.VMID]string) string {
	var waiting []string
	for id, v := range inUse {
		if home.OlderImage(v, newest) {
			waiting = append(waiting, id.Namespace+"/"+id.Name)
		}
	}
	slices.Sort(waiting)
	const apply = "apply it now with `invisible-dots computer reboot NAME -n NAMESPACE` (`kubectl get computers -o wide` shows RUNTIME-CURRENT)"
	switch {
	case len(inUse) == 0:
		return fmt.Sprintf("runtime ISO %s: no Dot of this host runs now; each takes it at its next start", newest)
	case len(waiting) == 0:
		return fmt.Sprintf("runtime ISO %s: every running Dot of this host (%d) runs it", newest, len(inUse))
	case len(waiting) == 1:
		return fmt.Sprintf("runtime ISO %s: 1 running Dot waits for it (%s) and takes it at its next start; %s", newest, waiting[0], apply)
	}
	return fmt.Sprintf("runtime ISO %s: %d running Dots wait for it (%s) and take it at their next start; %s", newest, len(waiting), strings.Join(waiting, ", "), apply)
}
