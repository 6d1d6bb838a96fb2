package proxyfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
)

// ExitUsage is the forwarder's exit code when it could not run the program
// at all (its own error, not the program's), as the relay's.
const ExitUsage = 125

// Options are one run of `dot-agentd proxy-forward`.
type Options struct {
	// As is the variable the program is given the local proxy in.
	As string
	// Argv is the program and its arguments.
	Argv []string
	// Environ is this process's environment, EnvUpstream among it.
	Environ []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
}

// Run forwards the upstream proxy of Environ on the loopback for as long as
// the program runs, and returns the code to exit with: the program's, or
// 128 plus the number of the signal that ended it. The signals that would end
// the forwarder are passed to the program, whose end ends the forwarder.
func Run(ctx context.Context, o Options) (int, error) {
	if len(o.Argv) == 0 || o.Argv[0] == "" {
		return ExitUsage, errors.New("proxy-forward: name a program after --")
	}
	if o.As == "" || strings.ContainsAny(o.As, "=\x00") {
		return ExitUsage, errors.New("proxy-forward: --as names the program's proxy variable")
	}
	upstream, env := "", make([]string, 0, len(o.Environ)+1)
	for _, kv := range o.Environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case EnvUpstream:
			upstream = v
		case o.As:
		default:
			env = append(env, kv)
		}
	}
	if upstream == "" {
		return ExitUsage, fmt.Errorf("proxy-forward: %s is not set", EnvUpstream)
	}
	d, err := NewDialer(upstream)
	if err != nil {
		return ExitUsage, fmt.Errorf("proxy-forward: %w", err)
	}
	f, err := Listen(d)
	if err != nil {
		return ExitUsage, fmt.Errorf("proxy-forward: %w", err)
	}
	f.Logf = func(format string, a ...any) { fmt.Fprintf(o.Stderr, format+"\n", a...) }
	defer f.Close()
	go f.Serve()

	cmd := exec.Command(o.Argv[0], o.Argv[1:]...)
	cmd.Env = append(env, o.As+"="+f.URL())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return ExitUsage, fmt.Errorf("proxy-forward: start %s: %w", o.Argv[0], err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			ctx = context.Background()
		case err := <-waited:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return 0, nil
			case errors.As(err, &ee):
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal()), nil
				}
				return ee.ExitCode(), nil
			default:
				return ExitUsage, fmt.Errorf("proxy-forward: %w", err)
			}
		}
	}
}
