package agentd

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// cappedBuffer keeps the first limit bytes written and counts the rest, so a
// command that writes without end is never blocked on its pipe and never
// fills the daemon's memory.
type cappedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	limit     int
	truncated bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.limit - c.buf.Len()
	if room < len(p) {
		c.truncated = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

func (c *cappedBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Bytes()
}

func (c *cappedBuffer) String() string { return string(c.Bytes()) }

func (c *cappedBuffer) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Len()
}

func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}

// killGroup ends a process group. The daemon holds CAP_KILL for exactly this
// (the group is the Dot's user's).
func killGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// handleExec runs ExecShell -lc COMMAND as the Dot's user in a process group
// of its own. The group is killed when the command reaches its timeout, when
// the request goes away, and when the shell has exited (background jobs of
// the group go with it; only what detached into another session outlives the
// command).
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	var req protocol.ExecRequest
	if err := decodeBody(r, 1<<20, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Command == "" {
		writeError(w, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "command is empty"))
		return
	}
	timeout := req.TimeoutMs
	switch {
	case timeout == 0:
		timeout = protocol.ExecDefaultTimeoutMs
	case timeout < 0 || timeout > protocol.ExecMaxTimeoutMs:
		writeError(w, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "timeout_ms must be between 1 and %d", protocol.ExecMaxTimeoutMs))
		return
	}
	cwd := s.resolveCwd(req.Cwd)
	if err := s.checkDir(cwd); err != nil {
		writeError(w, err)
		return
	}
	resp, err := s.runCommand(r.Context(), req.Command, cwd, time.Duration(timeout)*time.Millisecond)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// keepPath is the line put before a command: a login shell reads the
// profile, which sets PATH again (Debian's /etc/profile does), and the
// command must see the PATH the daemon built (ref 4.1: ~/.local/bin first).
func keepPath(env []string) string {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return "PATH='" + strings.ReplaceAll(path, "'", `'\''`) + "'; export PATH\n"
}

func (s *Server) runCommand(ctx context.Context, command, cwd string, timeout time.Duration) (protocol.ExecResponse, error) {
	env := s.env(nil)
	cmd := exec.Command(s.cfg.Shell, "-lc", keepPath(env)+command)
	cmd.Dir = cwd
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cfg.RunAs.credential(), Pdeathsig: syscall.SIGKILL}
	stdout := &cappedBuffer{limit: protocol.ExecOutputCap}
	stderr := &cappedBuffer{limit: protocol.ExecOutputCap}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A background job that keeps the pipes open must not hold the answer
	// once the group is gone.
	cmd.WaitDelay = 2 * time.Second
	if err := startClean(cmd); err != nil {
		return protocol.ExecResponse{}, errorf(http.StatusInternalServerError, protocol.ErrExecFailed, "start %s: %v", s.cfg.Shell, err)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The shell is reaped by Wait; the rest of its group is killed once it
	// has exited, which also closes the pipes Wait is reading.
	exited := make(chan struct{})
	go func() {
		_ = waitPidExit(pgid, exited)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var resp protocol.ExecResponse
	var waitErr error
	select {
	case waitErr = <-done:
	case <-exited:
		killGroup(pgid, syscall.SIGKILL)
		waitErr = <-done
	case <-timer.C:
		resp.TimedOut = true
		killGroup(pgid, syscall.SIGKILL)
		waitErr = <-done
	case <-ctx.Done():
		killGroup(pgid, syscall.SIGKILL)
		<-done
		return protocol.ExecResponse{}, errorf(499, protocol.ErrInternal, "the request went away: %v", ctx.Err())
	}
	killGroup(pgid, syscall.SIGKILL)
	resp.ExitCode = exitCode(cmd, waitErr)
	resp.Stdout, resp.StdoutTruncated = stdout.String(), stdout.truncated
	resp.Stderr, resp.StderrTruncated = stderr.String(), stderr.truncated
	return resp, nil
}

// exitCode is the process's exit status, or -1 when a signal ended it.
func exitCode(cmd *exec.Cmd, waitErr error) int {
	if cmd.ProcessState != nil {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1
		}
		return cmd.ProcessState.ExitCode()
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// waitPidExit blocks until the child pid has exited, without reaping it
// (WNOWAIT: cmd.Wait still collects its status), then closes exited.
func waitPidExit(pid int, exited chan<- struct{}) error {
	defer close(exited)
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}
