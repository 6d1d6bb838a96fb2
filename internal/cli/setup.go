package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/invisible-dots/invisible-dots/guest/image/testimage"
	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/hostagent/setup"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/webui"
	"github.com/invisible-dots/invisible-dots/web"
)

func newSetupCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Get QEMU, its accelerator and PostgreSQL ready on this host (runs doctor, then fixes what is missing); --all: everything up to a server to start",
		Long: `setup runs doctor, then installs what is missing with apt-get (qemu-system-x86, qemu-utils,
postgresql; directly as root, through sudo otherwise), prints the kvm group line when /dev/kvm
is not accessible, and records the CPU model in $INVISIBLE_DOTS_HOME/config/host.yaml when the
accelerator probe needs the override. It can be run again.

It acts for the person who runs the server: run it as that person (it calls sudo itself for
apt-get). Run under sudo, it checks /dev/kvm for SUDO_USER and writes into SUDO_USER's home,
giving host.yaml back to SUDO_USER; run as root with no SUDO_USER, it acts for root and says so.

setup --all does, in order, each step skipped when it is done, so running it again continues
a run that stopped: the host (setup itself), the web client (make build, when this binary was
built without it), the guest images (image build, which calls sudo itself), then prints how to
start the server and the web client's address. A step that fails ends the run with exit code 1
and the command to run again; Ctrl-C stops the image build cleanly and ends the run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := personFor("")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if p.Note != "" {
				fmt.Fprintln(out, p.Note)
			}
			if !all {
				return runSetup(cmd.Context(), out, p, nil)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			go func() {
				// A second Ctrl-C exits at once (ref 11.4).
				<-ctx.Done()
				stop()
			}()
			steps, cleanup := allSteps(p, out)
			defer cleanup()
			err = setup.RunAll(ctx, out, steps)
			var stepErr *setup.StepError
			if errors.As(err, &stepErr) {
				return &exitError{code: stepErr.ExitCode(), err: err}
			}
			if err != nil {
				return err
			}
			printStart(out, p)
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "also build the guest images, say what the web client needs, and say how to start the server; run it again to continue a run that stopped")
	return cmd
}

// runSetup is setup's own run for p. later names the doctor rows a later
// step of setup --all makes ready.
func runSetup(ctx context.Context, out io.Writer, p home.Person, later map[string]bool) error {
	d := setup.Real(doctor.Real(p.Home), out)
	if p.Name != "" {
		d.User = p.Name
	}
	d.Later = later
	if p.User != nil {
		d.Doctor.OpenKVM = setup.KVMFor(p.User)
		d.ForOther = true
	}
	_, err := setup.Run(ctx, d)
	return errors.Join(err, p.GiveBackHostConfig(os.Lchown))
}

// allSteps are setup --all's steps (ref 11.4) for p, each the code of the
// command that owns it, and what removes the guest binaries they built.
func allSteps(p home.Person, out io.Writer) ([]setup.Step, func()) {
	// The images step builds the guest binaries once, to tell whether it is
	// done and then to build.
	var bins guestBins
	var binsDir, repo string
	prepare := func(ctx context.Context) error {
		if bins.agentd != "" {
			return nil
		}
		wd, _ := os.Getwd()
		r, err := testimage.FindRepo(wd)
		if err != nil {
			return fmt.Errorf("the runtime ISO is built from this project's checkout: run setup --all inside it: %w", err)
		}
		if binsDir == "" {
			if binsDir, err = os.MkdirTemp("", "invisible-dots-guest-"); err != nil {
				return err
			}
		}
		b, err := buildGuestBins(ctx, r, binsDir)
		if err != nil && p.GiveBack && ctx.Err() == nil {
			// sudo's PATH and HOME are root's: its go, its module cache.
			return fmt.Errorf("%w\n(under sudo, Go is root's: run invisible-dots setup --all as %s, who builds with their own Go and calls sudo for the build)", err, p.Name)
		}
		if err != nil {
			return err
		}
		repo, bins = r, b
		return nil
	}
	imagesCommand := setup.ImageBuildCommand
	if os.Geteuid() != 0 {
		imagesCommand += " (it runs itself under sudo for the build)"
	}
	cleanup := func() {
		if binsDir != "" {
			os.RemoveAll(binsDir)
		}
	}
	return []setup.Step{
		{
			Name: "the host's packages", Command: "invisible-dots setup",
			Run: func(ctx context.Context) error {
				return runSetup(ctx, out, p, map[string]bool{doctor.RowGolden: true, doctor.RowRuntime: true})
			},
		},
		{
			Name: "the web client", Command: "make build",
			Done: func(context.Context) (string, bool, error) {
				if _, built := web.App(); built {
					return "built into this binary", true, nil
				}
				return "", false, nil
			},
			Run: func(context.Context) error {
				return &setup.LeftError{What: "this binary was built without the web client: make build builds it in (make run does too, before it starts the server)"}
			},
		},
		{
			Name: "the guest images", Command: imagesCommand,
			Done: func(ctx context.Context) (string, bool, error) {
				if _, ok := images.LatestDesktop(p.Home); !ok {
					// No golden image: nothing to gain from building the
					// binaries first.
					return "no golden image with the desktop in " + p.Home.Images(), false, nil
				}
				if err := prepare(ctx); err != nil {
					return "", false, err
				}
				sum, err := runtimeSum(bins)
				if err != nil {
					return "", false, err
				}
				detail, done := setup.ImagesDone(p.Home, sum)
				return detail, done, nil
			},
			Run: func(ctx context.Context) error {
				if err := prepare(ctx); err != nil {
					return err
				}
				if os.Geteuid() != 0 {
					return imageBuildAsRoot(ctx, out, p, repo, "", bins)
				}
				return imageBuild(ctx, out, p, repo, "", bins)
			},
		},
	}, cleanup
}

// printStart says how to start the server and where the web client is, for
// the end of setup --all. The server is not started: it runs in the
// foreground until Ctrl-C.
func printStart(out io.Writer, p home.Person) {
	listen, err := webui.ParseListen(os.Getenv(webui.EnvListen), false)
	if err != nil {
		listen, _ = webui.ParseListen("", false)
	}
	as := ""
	if p.GiveBack {
		as = " as " + p.Name + ", not root"
	}
	fmt.Fprintf(out, "\nstart the server%s (it runs in the foreground until Ctrl-C):\n", as)
	fmt.Fprintln(out, "  make run                 # in this checkout: builds the binary with the web client, then starts it")
	fmt.Fprintln(out, "  invisible-dots server    # this binary")
	if listen.SignIn {
		fmt.Fprintf(out, "then open the web client at %s and sign in with the token 'invisible-dots user add' makes\n", listen.URL())
	} else {
		fmt.Fprintf(out, "then open the web client at %s (no sign-in: the web server adds the API token itself; people of their own sign in with 'server --web-sign-in')\n", listen.URL())
	}
	fmt.Fprintln(out, "and store the OpenRouter key on its Home page, or: invisible-dots secret openrouter")
}
