// Command test-image builds the test image and the runtime ISO and registers
// them in a home (what `make test-image` runs; e2e tests call it too):
//
//	go run ./hostagent/images/cmd/test-image [--home DIR] [--work DIR] [--repo DIR]
//
// --home defaults to INVISIBLE_DOTS_HOME (or ~/.invisible-dots), --work to
// _output/test-image under the repository. An image whose inputs are
// unchanged since it was registered is not built again.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/invisible-dots/invisible-dots/guest/image/testimage"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "test-image:", err)
		os.Exit(1)
	}
}

func run() error {
	homeDir := flag.String("home", "", "INVISIBLE_DOTS_HOME to register the images in")
	work := flag.String("work", "", "cache directory (default <repo>/_output/test-image)")
	repo := flag.String("repo", "", "the repository root (default: found from the working directory)")
	flag.Parse()
	var err error
	if *repo == "" {
		wd, _ := os.Getwd()
		if *repo, err = testimage.FindRepo(wd); err != nil {
			return err
		}
	}
	if *work == "" {
		*work = filepath.Join(*repo, "_output", "test-image")
	}
	var h home.Layout
	if *homeDir != "" {
		h, err = home.New(*homeDir)
	} else {
		h, err = home.FromEnv()
	}
	if err != nil {
		return err
	}
	if err := home.QEMUPathProblem(h.Root); err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "test-image: "+format+"\n", args...) }
	if err := os.MkdirAll(*work, 0o755); err != nil {
		return fmt.Errorf("make the work directory %s: %w", *work, err)
	}
	out, err := os.MkdirTemp(*work, "out-")
	if err != nil {
		return fmt.Errorf("make the output folder: %w", err)
	}
	defer os.RemoveAll(out)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// The runtime ISO is built and registered here too: under the lock
	// every runtime builder takes (ref 3.2), held to the registration.
	lock, err := images.LockRuntimeBuild(ctx, h, logf)
	if err != nil {
		return err
	}
	defer lock.Release()
	res, err := testimage.Build(ctx, testimage.Options{
		Out: out, Repo: *repo, Work: *work, Log: logf,
		Registered: func(kind, digest string) (protocol.ImageManifest, bool) {
			return images.FindBuilt(h, home.ImageKind(kind), digest)
		},
	})
	if err != nil {
		return err
	}
	for _, m := range []struct{ what, path string }{{"runtime ISO", res.RuntimeManifest}, {"test image", res.GoldenManifest}} {
		if m.path == "" {
			continue
		}
		img, err := images.Register(h, m.path)
		if err != nil {
			return err
		}
		logf("%s %s registered", m.what, img.Version)
	}
	fmt.Printf("golden  %s\nruntime %s\nhome    %s\n", res.Golden.Version, res.Runtime.Version, h.Root)
	return nil
}
