package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/invisible-dots/invisible-dots/guest/image/golden"
	"github.com/invisible-dots/invisible-dots/guest/image/runtimeiso"
	"github.com/invisible-dots/invisible-dots/guest/image/testimage"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
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
	var work, repo string
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the golden image and the runtime ISO from Debian 12 packages and this checkout, and register them",
		Long: `image build builds the golden image (ref 3.3) without a builder VM: mmdebstrap installs
Debian 12 packages through this host's apt sources into a directory, provision.sh adds the
users, units and hardening of ref 4.1, mke2fs -d makes its file system and qemu-img the
qcow2 a Dot's disk sits on. It builds the runtime ISO (dot-agentd, the engine, their units)
from this checkout too, and registers both in $INVISIBLE_DOTS_HOME/images, where a new
Computer takes the newest golden image of this kind (the test image only where there is none).

It needs root and mmdebstrap, e2fsprogs, qemu-utils and npm. A run whose inputs (the recipe,
the apt sources and apt's Release files, the npm lock, our binaries) are unchanged since the
last registered build does nothing; run apt-get update first to take newer packages.
Downloaded packages are kept in --work for the next build. Ctrl-C stops it and registers
nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := home.FromEnv()
			if err != nil {
				return err
			}
			if err := golden.Check(); err != nil {
				return err
			}
			if err := home.QEMUPathProblem(h.Root); err != nil {
				return err
			}
			if repo == "" {
				wd, _ := os.Getwd()
				if repo, err = testimage.FindRepo(wd); err != nil {
					return fmt.Errorf("the runtime ISO is built from this project's checkout: run image build inside it, or pass --repo: %w", err)
				}
			}
			if work == "" {
				work = filepath.Join(h.ImagesCache(), "golden")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			return buildImages(ctx, h, repo, work, func(format string, args ...any) {
				fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...)
			})
		},
	}
	cmd.Flags().StringVar(&work, "work", "", "cache of packages and scratch space (default $INVISIBLE_DOTS_HOME/images/.cache/golden)")
	cmd.Flags().StringVar(&repo, "repo", "", "this project's checkout, for the runtime ISO (default: found from the working directory)")
	return cmd
}

// buildImages builds and registers the runtime ISO, then the golden image,
// under the home's golden build lock. Nothing is registered for a build
// that failed or was stopped: an image is registered by writing its manifest
// into images/ last (hostagent/images).
func buildImages(ctx context.Context, h home.Layout, repo, work string, logf func(string, ...any)) error {
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

	logf("runtime ISO: building dot-agentd and the engine")
	bin := filepath.Join(work, "bin")
	agentd, err := testimage.GoBuild(ctx, repo, "./guest/agentd/cmd/dot-agentd", filepath.Join(bin, "dot-agentd"))
	if err != nil {
		return err
	}
	engine, err := testimage.GoBuild(ctx, repo, "./guest/engine/cmd/dot-engine", filepath.Join(bin, "dot-engine"))
	if err != nil {
		return err
	}
	files, err := runtimeiso.Contents(agentd, engine)
	if err != nil {
		return err
	}
	if m, ok := images.FindBuilt(h, home.Runtime, runtimeiso.Sum(files)); ok {
		logf("runtime ISO %s already registered", m.Version)
	} else {
		mp, m, err := runtimeiso.Build(filepath.Join(out, "runtime"), files, time.Now())
		if err != nil {
			return err
		}
		if _, err := images.Register(h, mp); err != nil {
			return err
		}
		logf("runtime ISO %s registered", m.Version)
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
	return nil
}
