package agentd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func upgradeRequested(r *http.Request) bool {
	hasUpgrade := false
	for _, v := range r.Header.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				hasUpgrade = true
			}
		}
	}
	return hasUpgrade && strings.EqualFold(r.Header.Get("Upgrade"), protocol.ProcProtocol)
}

// handleProc is POST /v1/proc (ref 5.2): one program as the Dot's user, on
// a pseudo-terminal when asked, its input and output carried over the
// upgraded connection in dots-proc/1 frames. The program's process group
// lives exactly as long as the connection.
func (s *Server) handleProc(w http.ResponseWriter, r *http.Request) {
	if !upgradeRequested(r) {
		w.Header().Set("Upgrade", protocol.ProcProtocol)
		w.Header().Set("Connection", "Upgrade")
		writeError(w, errorf(http.StatusUpgradeRequired, protocol.ErrUpgradeRequired, "POST %s needs Connection: Upgrade and Upgrade: %s", protocol.PathProc, protocol.ProcProtocol))
		return
	}
	var req protocol.ProcRequest
	if err := decodeBody(r, 1<<20, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		writeError(w, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "argv names no program"))
		return
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			writeError(w, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "env entry %q is not NAME=VALUE", k))
			return
		}
	}
	cwd := s.resolveCwd(req.Cwd)
	if err := s.checkDir(cwd); err != nil {
		writeError(w, err)
		return
	}
	env := s.env(req.Env)
	prog, err := lookPath(req.Argv[0], env, cwd)
	if err != nil {
		writeError(w, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "%v", err))
		return
	}
	// Frames follow the body on the same connection: read the body to its
	// end so none of it is taken for a frame.
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		writeError(w, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "read the body: %v", err))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, errorf(http.StatusInternalServerError, protocol.ErrInternal, "take over the connection: %v", err))
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", protocol.ProcProtocol)
	if err := brw.Flush(); err != nil {
		return
	}
	p := &procSession{srv: s, conn: conn, in: brw.Reader}
	p.run(prog, req, cwd, env)
}

// lookPath finds a program without a slash in the PATH of env, the Dot's
// user's, not the daemon's.
func lookPath(name string, env []string, cwd string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(cwd, name)
		}
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		f := filepath.Join(dir, name)
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return f, nil
		}
	}
	return "", fmt.Errorf("program %q is not found in the PATH %s", name, path)
}

type procSession struct {
	srv  *Server
	conn net.Conn
	in   *bufio.Reader
	wmu  sync.Mutex
}

func (p *procSession) frame(typ byte, payload []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return protocol.WriteFrame(p.conn, typ, payload)
}

// frameWriter turns writes into frames of one type, split at ProcMaxFrame.
type frameWriter struct {
	p   *procSession
	typ byte
}

func (f frameWriter) Write(b []byte) (int, error) {
	for off := 0; off < len(b); off += protocol.ProcMaxFrame {
		end := min(off+protocol.ProcMaxFrame, len(b))
		if err := f.p.frame(f.typ, b[off:end]); err != nil {
			return off, err
		}
	}
	return len(b), nil
}

func (p *procSession) fail(code int, format string, args ...any) {
	_ = p.frame(protocol.FrameErrOutput, []byte(fmt.Sprintf("dot-agentd: "+format+"\n", args...)))
	b, _ := json.Marshal(protocol.ProcExit{ExitCode: code})
	_ = p.frame(protocol.FrameExit, b)
}

func (p *procSession) run(prog string, req protocol.ProcRequest, cwd string, env []string) {
	s := p.srv
	cmd := exec.Command(prog, req.Argv[1:]...)
	cmd.Args[0] = req.Argv[0]
	cmd.Dir = cwd
	cmd.Env = env
	cred := s.cfg.RunAs.credential()
	var (
		master    *os.File
		stdin     io.WriteCloser
		outDone   = make(chan struct{})
		startErr  error
		pgid      int
		closeOnce sync.Once
	)
	if req.TTY != nil {
		var slave *os.File
		var err error
		master, slave, err = s.openPTY()
		if err != nil {
			p.fail(126, "open a terminal: %v", err)
			return
		}
		defer master.Close()
		size := *req.TTY
		if size.Cols == 0 || size.Rows == 0 {
			size = protocol.TTYSize{Cols: 80, Rows: 24}
		}
		_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: cred}
		startErr = startClean(cmd)
		slave.Close()
		if startErr == nil {
			go func() {
				defer close(outDone)
				_, _ = io.Copy(frameWriter{p, protocol.FrameOutput}, master) // ends with EIO when the terminal has no holder left
			}()
		}
	} else {
		cmd.Stdout = frameWriter{p, protocol.FrameOutput}
		cmd.Stderr = frameWriter{p, protocol.FrameErrOutput}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
		cmd.WaitDelay = 2 * time.Second
		var err error
		stdin, err = cmd.StdinPipe()
		if err != nil {
			p.fail(126, "make the input pipe: %v", err)
			return
		}
		startErr = startClean(cmd)
		close(outDone) // cmd.Wait copies the output
	}
	if startErr != nil {
		code := 126
		if errors.Is(startErr, os.ErrNotExist) {
			code = 127
		}
		p.fail(code, "start %s: %v", req.Argv[0], startErr)
		return
	}
	pgid = cmd.Process.Pid
	closeInput := func() {
		closeOnce.Do(func() {
			if stdin != nil {
				stdin.Close()
			}
		})
	}
	// The caller's frames. A caller that goes away takes the group with it.
	callerGone := make(chan struct{})
	go func() {
		defer close(callerGone)
		for {
			typ, payload, err := protocol.ReadFrame(p.in)
			if err != nil {
				return
			}
			switch typ {
			case protocol.FrameInput:
				if master != nil {
					_, _ = master.Write(payload)
				} else if stdin != nil {
					_, _ = stdin.Write(payload)
				}
			case protocol.FrameEOF:
				if master != nil {
					_, _ = master.Write([]byte{4})
				} else {
					closeInput()
				}
			case protocol.FrameResize:
				if sz, err := protocol.ParseResize(payload); err == nil && master != nil {
					_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Rows, Col: sz.Cols})
				}
			case protocol.FrameSignal:
				if sig, err := protocol.ParseSignal(payload); err == nil {
					killGroup(pgid, syscall.Signal(sig))
				}
			}
		}
	}()
	exited := make(chan struct{})
	go func() { _ = waitPidExit(pgid, exited) }()
	select {
	case <-exited:
	case <-callerGone:
		killGroup(pgid, syscall.SIGKILL)
		<-exited
	}
	// The program has exited: what is left of its group goes too, so the
	// output ends and nothing outlives the connection but what detached.
	killGroup(pgid, syscall.SIGKILL)
	waitErr := cmd.Wait()
	select {
	case <-outDone:
	case <-time.After(2 * time.Second):
		// Something that left the group (setsid) still holds the terminal:
		// its output is not the program's.
		master.Close()
		<-outDone
	}
	closeInput()
	var exit protocol.ProcExit
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		exit.Signal = int(ws.Signal())
		exit.ExitCode = 128 + exit.Signal
	} else {
		exit.ExitCode = exitCode(cmd, waitErr)
	}
	b, _ := json.Marshal(exit)
	_ = p.frame(protocol.FrameExit, b)
}

// openPTY opens a pseudo-terminal as the Dot's user, so the terminal the
// program gets is that user's (devpts gives the slave the opener's
// file-system user).
func (s *Server) openPTY() (master, slave *os.File, err error) {
	type pair struct{ m, s *os.File }
	pp, err := asUser(s.cfg.RunAs, func() (pair, error) {
		mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return pair{}, fmt.Errorf("open /dev/ptmx: %w", err)
		}
		// Non-blocking, so the runtime's poller serves it and Close ends a
		// read that a detached holder of the terminal would keep waiting.
		if err := unix.SetNonblock(mfd, true); err != nil {
			unix.Close(mfd)
			return pair{}, fmt.Errorf("set the terminal non-blocking: %w", err)
		}
		m := os.NewFile(uintptr(mfd), "/dev/ptmx")
		if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
			m.Close()
			return pair{}, fmt.Errorf("unlock the terminal: %w", err)
		}
		n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
		if err != nil {
			m.Close()
			return pair{}, fmt.Errorf("read the terminal's number: %w", err)
		}
		name := fmt.Sprintf("/dev/pts/%d", n)
		sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			m.Close()
			return pair{}, fmt.Errorf("open %s: %w", name, err)
		}
		return pair{m, os.NewFile(uintptr(sfd), name)}, nil
	})
	return pp.m, pp.s, err
}
