// Package mcphost is the engine's one MCP client path (ref 8.3, 8.8), on the
// official Go SDK (github.com/modelcontextprotocol/go-sdk): how a server is
// reached (Launcher), one server kept connected with its state, its tools and
// its calls (Server), and the servers a Dot's config declares (Servers). The
// browser identities use Server with a launcher of their own, so there is one
// client, not two.
package mcphost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Launcher says how the engine reaches a server: a command is started
// through `dot-agentd relay` as the user dot, in the Dot's home, like every
// program of the model, so it reads and writes what the Dot's commands can
// and nothing of the engine's; a url is reached from the engine over
// streamable HTTP (SSE for a URL ending in /sse).
type Launcher struct {
	// RelayPath is the dot-agentd binary (INVISIBLE_DOTS_AGENTD_BIN).
	RelayPath string
	// AgentdSocket is dot-agentd's local socket the relay reaches.
	AgentdSocket string
	// Cwd is where a command runs (the Dot's home).
	Cwd string
	// Path is PATH of the relay's own environment; the program's environment
	// is dot's login shell's, built by dot-agentd.
	Path string
	// HTTPClient carries a url server's requests; nil is a plain client.
	HTTPClient *http.Client
	// TerminateAfter is how long a closing command gets after its input
	// ends before the relay is signalled (the SDK's default is 5 s).
	TerminateAfter time.Duration
}

// relaySubcommand and the flags are dot-agentd relay's command line (ref
// 5.2): relay [--socket P] [--cwd DIR] [--env N=V]... [--env-from N]... -- PROGRAM [ARGS...]
const relaySubcommand = "relay"

// errNotSet is a server whose entry names a secret the host has not pushed:
// it is not started until its secrets change (ref 8.3).
type errNotSet struct{ names []string }

func (e errNotSet) Error() string {
	return fmt.Sprintf("its secret %s is not set: the person sets it in the Dot's settings", strings.Join(e.names, ", "))
}

// RelayCommand is the relay process of a command server: its env on the
// command line with --env, its secrets named with --env-from and their values
// only in the relay's own environment (ref 4.3), so no secret is ever on a
// command line, where every user of the computer could read it.
func (l Launcher) RelayCommand(c protocol.MCPServerConfig, secrets map[string]string) (*exec.Cmd, error) {
	if l.RelayPath == "" {
		return nil, fmt.Errorf("the dot-agentd relay is not configured (%s)", protocol.EnvAgentdBin)
	}
	var missing []string
	for _, n := range c.Secrets {
		if _, ok := secrets[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, errNotSet{missing}
	}
	args := []string{relaySubcommand}
	if l.AgentdSocket != "" {
		args = append(args, "--socket", l.AgentdSocket)
	}
	if l.Cwd != "" {
		args = append(args, "--cwd", l.Cwd)
	}
	for _, k := range sortedKeys(c.Env) {
		args = append(args, "--env", k+"="+c.Env[k])
	}
	names := append([]string(nil), c.Secrets...)
	sort.Strings(names)
	for _, n := range names {
		args = append(args, "--env-from", n)
	}
	args = append(args, "--", c.Command)
	args = append(args, c.Args...)
	cmd := exec.Command(l.RelayPath, args...)
	cmd.Env = []string{"PATH=" + l.Path}
	for _, n := range names {
		cmd.Env = append(cmd.Env, n+"="+secrets[n])
	}
	// Its own session, so a signal meant for the engine does not reach it;
	// ending the relay makes dot-agentd end the server's process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd, nil
}

// Dialer is how a server of cfg with the given secrets is reached, for
// StartServer: the declared servers' way, also used by the browser
// identities, so both go through one client.
func (l Launcher) Dialer(c protocol.MCPServerConfig, secrets map[string]string) Dialer {
	return func(stderr io.Writer) (sdk.Transport, error) { return l.transport(c, secrets, stderr) }
}

// transport returns the SDK transport of one server. A command's standard
// error goes to stderr (the engine keeps its tail to say why a server failed).
func (l Launcher) transport(c protocol.MCPServerConfig, secrets map[string]string, stderr io.Writer) (sdk.Transport, error) {
	if c.Command != "" {
		cmd, err := l.RelayCommand(c, secrets)
		if err != nil {
			return nil, err
		}
		cmd.Stderr = stderr
		return &process{cmd: cmd, terminateAfter: l.TerminateAfter}, nil
	}
	var missing []string
	headers := http.Header{}
	for _, k := range sortedKeys(c.Headers) {
		headers.Set(k, c.Headers[k])
	}
	for _, n := range c.Secrets {
		v, ok := secrets[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		headers.Set(n, v)
	}
	if len(missing) > 0 {
		return nil, errNotSet{missing}
	}
	base := l.HTTPClient
	if base == nil {
		base = &http.Client{}
	}
	client := *base
	client.Transport = headerTransport{headers: headers, next: base.Transport}
	if strings.HasSuffix(strings.TrimRight(urlPath(c.URL), "/"), "/sse") {
		return &sdk.SSEClientTransport{Endpoint: c.URL, HTTPClient: &client}, nil
	}
	// MaxRetries is the SDK's reconnection of a dropped stream; the engine
	// restarts a server itself, with its own backoff, so it is left to the
	// SDK's default for the stream and no call is ever repeated by us.
	return &sdk.StreamableClientTransport{Endpoint: c.URL, HTTPClient: &client}, nil
}

func urlPath(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	return raw
}

// headerTransport adds a url server's headers, its secrets among them, to
// every request; they live in this process's memory only (ref 4.3).
type headerTransport struct {
	headers http.Header
	next    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header[k] = append([]string(nil), v...)
	}
	next := h.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// process is the stdio transport of a command server. The SDK's own
// CommandTransport waits for the process inside its Close, where nothing else
// can see the exit; this one waits for it as soon as it starts, so the engine
// knows when the relay ended and with what, after its standard error was read
// to the end (what a person and the model read of a crash).
type process struct {
	cmd            *exec.Cmd
	terminateAfter time.Duration
	exited         chan struct{}
	waitErr        error
}

// Connect starts the relay and connects to it over its stdin and stdout.
func (p *process) Connect(ctx context.Context) (sdk.Connection, error) {
	// The read end of stdout is ours, not exec's: Wait closes the pipes it
	// makes, which could drop the server's last messages unread.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("make the server's output pipe: %w", err)
	}
	p.cmd.Stdout = outW
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("start the dot-agentd relay: %w", err)
	}
	outW.Close()
	p.exited = make(chan struct{})
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return (&sdk.IOTransport{Reader: outR, Writer: &processInput{WriteCloser: stdin, p: p}}).Connect(ctx)
}

// Exited is closed once the relay ended and its standard error was read.
func (p *process) Exited() <-chan struct{} { return p.exited }

// ExitErr is how the relay ended (the server's exit status, which the relay
// takes as its own); valid once Exited is closed.
func (p *process) ExitErr() error { return p.waitErr }

// kill ends the relay at once; dot-agentd then ends the server's process
// group (ref 5.2).
func (p *process) kill() {
	if p.exited == nil {
		return
	}
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
	}
}

// processInput closes a server the way the MCP specification says a client
// ends a stdio server: its input ends, then SIGTERM if it has not exited
// after a while (the relay passes the signal to the server's group), then
// SIGKILL.
type processInput struct {
	io.WriteCloser
	p *process
}

func (w *processInput) Close() error {
	err := w.WriteCloser.Close()
	wait := w.p.terminateAfter
	if wait <= 0 {
		wait = 5 * time.Second
	}
	for _, sig := range []os.Signal{syscall.SIGTERM, os.Kill} {
		select {
		case <-w.p.exited:
			return err
		case <-time.After(wait):
		}
		_ = w.p.cmd.Process.Signal(sig)
	}
	select {
	case <-w.p.exited:
	case <-time.After(wait):
		return errors.Join(err, errors.New("the dot-agentd relay did not exit after SIGKILL"))
	}
	return err
}
