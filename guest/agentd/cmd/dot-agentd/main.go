// Command dot-agentd is the daemon of a Dot's computer (ref 4.1, 5.2), and,
// as `dot-agentd relay`, the engine's client of its POST /v1/proc.
//
//	dot-agentd [--listen :1024] [--socket P] [--config F] [--run-as dot]
//	dot-agentd relay [--socket P] [--cwd DIR] [--tty] [--env N=V]... [--env-from N]... -- PROGRAM [ARGS...]
//	dot-agentd proxy-forward --as NAME -- PROGRAM [ARGS...]
//
// proxy-forward runs PROGRAM (a browser identity's @playwright/mcp, as dot)
// with NAME set to a SOCKS5 proxy of its own on the loopback that forwards
// through the proxy in INVISIBLE_DOTS_UPSTREAM_PROXY with its credentials
// (package proxyfwd), and ends with it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/invisible-dots/invisible-dots/guest/agentd"
	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		os.Exit(relay(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == proxyfwd.Subcommand {
		os.Exit(proxyForward(os.Args[2:]))
	}
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	if err := serve(args); err != nil {
		fmt.Fprintln(os.Stderr, "dot-agentd:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("dot-agentd", flag.ContinueOnError)
	runAsDefault, set := os.LookupEnv(protocol.RunAsEnv)
	if !set {
		runAsDefault = protocol.DefaultRunAs
	}
	home := os.Getenv(protocol.DotHomeEnv)
	if home == "" {
		home = protocol.DefaultDotHome
	}
	o := agentd.Options{}
	fs.StringVar(&o.Listen, "listen", agentd.ListenAddr, "TCP address of the host's door")
	fs.StringVar(&o.Socket, "socket", protocol.AgentdSocketPath, "the engine's unix socket (empty: none)")
	fs.StringVar(&o.ConfigPath, "config", protocol.GuestConfigPath, "the Dot's guest config (dotId, token)")
	fs.StringVar(&o.RunAs, "run-as", runAsDefault, "the user the work runs as; empty is development mode ("+protocol.RunAsEnv+")")
	fs.StringVar(&o.Home, "home", home, "the Dot's home ("+protocol.DotHomeEnv+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return agentd.Run(ctx, o)
}

func relay(args []string) int {
	fs := flag.NewFlagSet("dot-agentd relay", flag.ContinueOnError)
	o := agentd.RelayOptions{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	var env, envFrom multi
	fs.StringVar(&o.Socket, "socket", protocol.AgentdSocketPath, "dot-agentd's local socket")
	fs.StringVar(&o.Cwd, "cwd", "", "working directory (relative to the Dot's home)")
	fs.BoolVar(&o.TTY, "tty", false, "run the program on a pseudo-terminal")
	fs.Var(&env, "env", "NAME=VALUE for the program (repeatable)")
	fs.Var(&envFrom, "env-from", "NAME of a variable of this environment to pass on (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return agentd.RelayExitUsage
	}
	o.Env, o.EnvFrom, o.Argv = env, envFrom, fs.Args()
	code, err := agentd.Relay(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dot-agentd", err)
	}
	return code
}

func proxyForward(args []string) int {
	fs := flag.NewFlagSet("dot-agentd "+proxyfwd.Subcommand, flag.ContinueOnError)
	o := proxyfwd.Options{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ()}
	fs.StringVar(&o.As, "as", "", "the variable PROGRAM is given the local proxy in")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return proxyfwd.ExitUsage
	}
	o.Argv = fs.Args()
	code, err := proxyfwd.Run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dot-agentd", err)
	}
	return code
}

type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
