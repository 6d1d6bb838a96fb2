package agentd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// RelayOptions is one `dot-agentd relay` run: a program started through the
// local socket's POST /v1/proc, with this process's input and output carried
// through.
type RelayOptions struct {
	Socket string
	Cwd    string
	TTY    bool
	// Env holds NAME=VALUE entries given on the command line.
	Env []string
	// EnvFrom names variables of this process's environment passed on by
	// name, so a secret never stands on a command line.
	EnvFrom []string
	Argv    []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// LookupEnv reads this process's environment (os.LookupEnv when nil).
	LookupEnv func(string) (string, bool)
}

// RelayExitUsage is the relay's exit code when it could not run the program
// at all (its own error, not the program's).
const RelayExitUsage = 125

// Relay runs the program and returns the code the relay exits with: the
// program's, or 128 plus the number of the signal that ended it.
func Relay(ctx context.Context, o RelayOptions) (int, error) {
	if len(o.Argv) == 0 || o.Argv[0] == "" {
		return RelayExitUsage, errors.New("relay: name a program after --")
	}
	lookupEnv := o.LookupEnv
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	req := protocol.ProcRequest{Argv: o.Argv, Cwd: o.Cwd}
	for _, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return RelayExitUsage, fmt.Errorf("relay: --env %q is not NAME=VALUE", k)
		}
		req.Env = append(req.Env, kv)
	}
	for _, name := range o.EnvFrom {
		v, ok := lookupEnv(name)
		if !ok {
			return RelayExitUsage, fmt.Errorf("relay: --env-from %s: the variable is not set in the relay's environment", name)
		}
		req.Env = append(req.Env, name+"="+v)
	}
	stdinFile, _ := o.Stdin.(*os.File)
	var restore func()
	if o.TTY {
		size := protocol.TTYSize{Cols: 80, Rows: 24}
		if stdinFile != nil {
			if ws, err := unix.IoctlGetWinsize(int(stdinFile.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
				size = protocol.TTYSize{Cols: ws.Col, Rows: ws.Row}
			}
		}
		req.TTY = &size
	}
	body, err := json.Marshal(req)
	if err != nil {
		return RelayExitUsage, fmt.Errorf("relay: encode the request: %w", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", o.Socket)
	if err != nil {
		return RelayExitUsage, fmt.Errorf("relay: reach dot-agentd at %s: %w", o.Socket, err)
	}
	defer conn.Close()
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: agentd\r\nConnection: Upgrade\r\nUpgrade: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", protocol.PathProc, protocol.ProcProtocol, len(body))
	head.Write(body)
	if _, err := conn.Write(head.Bytes()); err != nil {
		return RelayExitUsage, fmt.Errorf("relay: send the request: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	if err != nil {
		return RelayExitUsage, fmt.Errorf("relay: read dot-agentd's answer: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		var e protocol.ErrorResponse
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if protocol.DecodeBytes(b, &e) == nil && e.Error != "" {
			return RelayExitUsage, fmt.Errorf("relay: dot-agentd refused the program (%d %s): %s", resp.StatusCode, e.Error, e.Message)
		}
		return RelayExitUsage, fmt.Errorf("relay: dot-agentd answered %s, not 101", resp.Status)
	}

	var wmu sync.Mutex
	send := func(typ byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return protocol.WriteFrame(conn, typ, p)
	}
	if o.TTY && stdinFile != nil {
		if r, err := makeRaw(int(stdinFile.Fd())); err == nil {
			restore = r
			defer restore()
		}
	}
	sigs := make(chan os.Signal, 4)
	if o.TTY && stdinFile != nil {
		signal.Notify(sigs, syscall.SIGWINCH)
	}
	// Without a terminal, the signals that would end the relay end the
	// program's group instead; the program's exit then ends the relay.
	if !o.TTY {
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	}
	defer signal.Stop(sigs)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case sig := <-sigs:
				if sig == syscall.SIGWINCH {
					if ws, err := unix.IoctlGetWinsize(int(stdinFile.Fd()), unix.TIOCGWINSZ); err == nil {
						_ = send(protocol.FrameResize, protocol.ResizePayload(protocol.TTYSize{Cols: ws.Col, Rows: ws.Row}))
					}
					continue
				}
				_ = send(protocol.FrameSignal, protocol.SignalPayload(int(sig.(syscall.Signal))))
			}
		}
	}()
	if o.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := o.Stdin.Read(buf)
				if n > 0 {
					if send(protocol.FrameInput, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					_ = send(protocol.FrameEOF, nil)
					return
				}
			}
		}()
	} else {
		_ = send(protocol.FrameEOF, nil)
	}
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	for {
		typ, payload, err := protocol.ReadFrame(br)
		if err != nil {
			return 255, fmt.Errorf("relay: dot-agentd ended the connection without the program's exit status: %w", err)
		}
		switch typ {
		case protocol.FrameOutput:
			_, _ = o.Stdout.Write(payload)
		case protocol.FrameErrOutput:
			_, _ = o.Stderr.Write(payload)
		case protocol.FrameExit:
			// Read strictly (exact keys, one value; the frame's size is
			// ReadFrame's bound): a status that is not the protocol's is not
			// passed on as the program's.
			var x protocol.ProcExit
			if err := protocol.DecodeBytes(payload, &x); err != nil {
				return 255, fmt.Errorf("relay: the exit frame of POST %s is refused: %w", protocol.PathProc, err)
			}
			return x.ExitCode, nil
		}
	}
}

// makeRaw puts a terminal in raw mode (cfmakeraw) and returns what restores
// it.
func makeRaw(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
