package port

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// ProgramName is the WhatsApp program's file name.
const ProgramName = "invisible-dots-whatsapp"

// SocketName is the program's socket in the directory Launch is given.
const SocketName = "whatsapp.sock"

// ErrNotInstalled: the WhatsApp program is not found. It is a separate,
// opt-in build (its Signal library is GPL-3.0; the server holds nothing
// GPL), so a server without it runs every other channel.
var ErrNotInstalled = errors.New("the WhatsApp program (" + ProgramName + ") is not installed: build it with 'make whatsapp' (it is written to bin/, next to invisible-dots) or put it on PATH, and start the server with INVISIBLE_DOTS_WHATSAPP=1")

// LaunchOptions say where the program is and where its socket goes.
type LaunchOptions struct {
	// Program is the program's path; empty finds it (Find).
	Program string
	// Dir is a directory for the socket, made private (0700) if it is not;
	// the socket's path must fit a unix socket's 108 bytes.
	Dir string
	// Log hears the program's own log lines, which hold no secret.
	Log logr.Logger
}

// Find is the program's path: override when given, else the file next to
// the server's executable (the same release), else the one on PATH.
func Find(override string) (string, error) {
	if override != "" {
		if st, err := os.Stat(override); err != nil || st.IsDir() {
			return "", fmt.Errorf("%w (%s was given, and is not a file)", ErrNotInstalled, override)
		}
		return override, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), ProgramName)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(ProgramName); err == nil {
		return p, nil
	}
	return "", ErrNotInstalled
}

// Program is the running WhatsApp program: started again when it dies,
// stopped when Launch's ctx ends. Every Adapter of the server dials it;
// each connection is a session of its own.
type Program struct {
	path   string
	socket string
	log    logr.Logger
	done   chan struct{}

	mu      sync.Mutex
	exited  chan struct{} // closed when the current process ends
	lastErr error
}

// Launch starts the program on a socket in opts.Dir and waits until it
// listens. It is stopped (SIGTERM, then killed after 5 s) when ctx ends,
// and started again with backoff when it dies before.
func Launch(ctx context.Context, opts LaunchOptions) (*Program, error) {
	path, err := Find(opts.Program)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the WhatsApp program's socket directory: %w", err)
	}
	// Whoever can reach the socket can read the device's keys as they are
	// written: only this user may enter the directory.
	if err := os.Chmod(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the WhatsApp program's socket directory private: %w", err)
	}
	socket := filepath.Join(opts.Dir, SocketName)
	if len(socket) > 107 {
		return nil, fmt.Errorf("the WhatsApp program's socket path %s is longer than a unix socket allows (107 bytes): use a shorter home directory", socket)
	}
	p := &Program{path: path, socket: socket, log: opts.Log, done: make(chan struct{})}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	if err := p.waitListening(ctx, 15*time.Second); err != nil {
		return nil, err
	}
	go p.supervise(ctx)
	return p, nil
}

// Socket is the socket's path.
func (p *Program) Socket() string { return p.socket }

// Done is closed once the program stopped for good (ctx ended).
func (p *Program) Done() <-chan struct{} { return p.done }

func (p *Program) start(ctx context.Context) error {
	_ = os.Remove(p.socket) // a socket left by a process that died
	cmd := exec.CommandContext(ctx, p.path, "--socket", p.socket)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = sysProcAttr()
	cmd.Env = os.Environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("%w (%s: %v)", ErrNotInstalled, p.path, err)
		}
		return fmt.Errorf("starting the WhatsApp program: %w", err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.exited = exited
	p.mu.Unlock()
	go p.relay(out)
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// relay passes the program's log lines to the server's log.
func (p *Program) relay(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		p.log.Info(sc.Text(), "program", ProgramName)
	}
}

func (p *Program) current() (exited chan struct{}, lastErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited, p.lastErr
}

// waitListening waits until the socket takes a connection, the process
// ends, or d passes.
func (p *Program) waitListening(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	exited, _ := p.current()
	for {
		c, err := net.Dial("unix", p.socket)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			_, lastErr := p.current()
			return fmt.Errorf("the WhatsApp program ended before it listened (%v): its log says why", lastErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the WhatsApp program did not listen on %s within %s", p.socket, d)
		}
	}
}

// supervise starts the program again when it dies, after a backoff that
// grows from 1 s to 30 s (back to 1 s after a minute of running).
func (p *Program) supervise(ctx context.Context) {
	defer close(p.done)
	wait := time.Second
	for {
		started := time.Now()
		exited, _ := p.current()
		select {
		case <-ctx.Done():
			<-exited
			_ = os.Remove(p.socket)
			return
		case <-exited:
		}
		_, lastErr := p.current()
		if time.Since(started) > time.Minute {
			wait = time.Second
		}
		p.log.Info("the WhatsApp program ended; it is started again", "err", fmt.Sprint(lastErr), "after", wait.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, 30*time.Second)
		if err := p.start(ctx); err != nil {
			p.log.Error(err, "the WhatsApp program could not be started again")
			// The current process is the one that ended: wait and retry.
			continue
		}
		if err := p.waitListening(ctx, 15*time.Second); err != nil && ctx.Err() == nil {
			p.log.Error(err, "the WhatsApp program did not come back")
		}
	}
}

// Dial connects to the program; while it is being started again, it waits
// up to 15 s (or ctx) for it to listen.
func (p *Program) Dial(ctx context.Context) (net.Conn, error) {
	deadline := time.Now().Add(15 * time.Second)
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", p.socket)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-p.done:
			return nil, errors.New("the WhatsApp program was stopped")
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the WhatsApp program does not listen on %s: %w", p.socket, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
