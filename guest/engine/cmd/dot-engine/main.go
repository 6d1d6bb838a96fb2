// Command dot-engine is the Dot's engine (ref 8): it serves the agent routes
// of ref 5.3 on its unix socket and runs the Dot's work. `--version` answers;
// any other argument is refused. Everything else comes from the environment,
// read once at start (ref 8.8).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/invisible-dots/invisible-dots/guest/engine/daemon"
)

// version is stamped at build time with -ldflags -X main.version=...
var version = "dev"

func main() {
	if len(os.Args) > 1 {
		if len(os.Args) == 2 && os.Args[1] == "--version" {
			fmt.Println("dot-engine", version)
			return
		}
		fmt.Fprintln(os.Stderr, "dot-engine takes no arguments but --version; it reads its settings from the environment")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := daemon.Run(ctx, daemon.ConfigFromEnv(os.Getenv), daemon.Deps{Log: log}); err != nil {
		log.Error("dot-engine", "err", err)
		os.Exit(1)
	}
}
