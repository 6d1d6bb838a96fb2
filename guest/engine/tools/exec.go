package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Limits of exec (ref 8.3).
const (
	ExecDefaultTimeout = 60 * time.Second
	ExecMaxTimeout     = 600 * time.Second
	// ttyDefaultYield is how long exec with tty waits for the first screen
	// when yield_time_ms is not given: a terminal job is always a background
	// job (ref 8.3).
	ttyDefaultYield = time.Second
	// sessionDefaultYield is exec_session's wait for output.
	sessionDefaultYield = time.Second
	// MaxJobs bounds the background jobs alive at once.
	MaxJobs = 16
	// jobOutputCap bounds what a job keeps unread per stream. No tool has a
	// fixed cap (ref 8.3: the window decides), so this is far above any
	// model's window (8 MiB is about two million tokens) and exists only so a
	// runaway command cannot exhaust the engine's memory.
	jobOutputCap = 8 << 20
	// ttyCols and ttyRows: dot-agentd's pseudo-terminal is 80x24 (ref 8.8).
	ttyCols = 80
	ttyRows = 24
)

// The dot-agentd relay's command line (ref 5.2): dot-agentd relay [--socket P]
// [--cwd DIR] [--tty] [--env NAME=VALUE]... [--env-from NAME]... -- PROGRAM [ARGS...]
const (
	relaySubcommand = "relay"
	relayShell      = "/bin/bash"
)

// relaySpec is one program to run through the relay.
type relaySpec struct {
	Argv []string
	Cwd  string
	TTY  bool
	// Env is passed with --env NAME=VALUE; EnvFrom names variables of the
	// relay's own environment passed with --env-from, so a secret's value is
	// never on a command line (MCP servers, later).
	Env     []string
	EnvFrom map[string]string
}

func (r *Runner) relayCommand(spec relaySpec) *exec.Cmd {
	args := []string{relaySubcommand, "--socket", r.env.AgentdSocket}
	if spec.Cwd != "" {
		args = append(args, "--cwd", spec.Cwd)
	}
	if spec.TTY {
		args = append(args, "--tty")
	}
	for _, e := range spec.Env {
		args = append(args, "--env", e)
	}
	names := make([]string, 0, len(spec.EnvFrom))
	for n := range spec.EnvFrom {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		args = append(args, "--env-from", n)
	}
	args = append(args, "--")
	args = append(args, spec.Argv...)
	cmd := exec.Command(r.env.RelayPath, args...)
	// PATH is the relay's only variable (ref 8.8); the command's environment is
	// dot's login shell's, built by dot-agentd.
	cmd.Env = []string{"PATH=" + r.env.Path}
	for _, n := range names {
		cmd.Env = append(cmd.Env, n+"="+spec.EnvFrom[n])
	}
	// Its own session, so a kill reaches the relay and nothing of the engine;
	// ending the relay makes dot-agentd kill the remote process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

// job is one command running through the relay.
type job struct {
	id      string
	command string
	tty     bool
	started time.Time

	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu          sync.Mutex
	stdout      []byte // unread output (everything, on a terminal)
	stderr      []byte
	dropped     int // bytes dropped over jobOutputCap since the last read
	screen      screenText
	notify      chan struct{} // closed and replaced whenever output arrives
	done        chan struct{} // closed when the relay has exited
	exit        int           // the relay's exit code: the program's, or 128+signal
	waitErr     error
	killed      bool // the engine ended it (timeout, terminate, cancel)
	stdinClosed bool
}

// runRelay starts a command through the relay and the goroutines that read it.
func (r *Runner) runRelay(spec relaySpec, command string) (*job, error) {
	if r.env.RelayPath == "" {
		return nil, errors.New("the dot-agentd relay is not configured (INVISIBLE_DOTS_AGENTD_BIN)")
	}
	cmd := r.relayCommand(spec)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the dot-agentd relay %s: %w", r.env.RelayPath, err)
	}
	j := &job{
		command: command, tty: spec.TTY, started: r.env.Now(), cmd: cmd, stdin: stdin,
		notify: make(chan struct{}), done: make(chan struct{}),
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go j.copy(&wg, stdout, false)
	go j.copy(&wg, stderr, true)
	go func() {
		wg.Wait()
		err := cmd.Wait()
		j.mu.Lock()
		j.exit = cmd.ProcessState.ExitCode()
		if err != nil && !errors.As(err, new(*exec.ExitError)) {
			j.waitErr = err
		}
		j.mu.Unlock()
		close(j.done)
	}()
	return j, nil
}

func (j *job) copy(wg *sync.WaitGroup, rd io.Reader, isErr bool) {
	defer wg.Done()
	buf := make([]byte, 32*1024)
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			j.mu.Lock()
			dst := &j.stdout
			if isErr {
				dst = &j.stderr
			}
			room := jobOutputCap - len(*dst)
			if room < n {
				// Keep the newest output: the start of a runaway stream
				// matters less than where it is now.
				over := n - room
				if over > len(*dst) {
					over = len(*dst)
				}
				*dst = (*dst)[over:]
				j.dropped += over
			}
			*dst = append(*dst, buf[:n]...)
			close(j.notify)
			j.notify = make(chan struct{})
			j.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// kill ends the relay and so the remote process group (ref 5.2).
func (j *job) kill() {
	if j.finished() {
		return
	}
	j.mu.Lock()
	j.killed = true
	j.mu.Unlock()
	if p := j.cmd.Process; p != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
}

// closeStdin ends the program's input (^D on a terminal).
func (j *job) closeStdin() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.stdinClosed {
		j.stdinClosed = true
		_ = j.stdin.Close()
	}
}

func (j *job) finished() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// take returns the output not read yet, rendered (the screen's text on a
// terminal), and forgets it.
func (j *job) take() (out, errOut string, dropped int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.tty {
		out = j.screen.feed(j.stdout)
	} else {
		out = string(j.stdout)
	}
	errOut = string(j.stderr)
	dropped = j.dropped
	j.stdout, j.stderr, j.dropped = nil, nil, 0
	return out, errOut, dropped
}

// status is the job's state in a sentence.
func (j *job) status() string {
	if !j.finished() {
		return "running"
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.waitErr != nil:
		return fmt.Sprintf("failed: %v", j.waitErr)
	case j.killed:
		return "stopped"
	default:
		return fmt.Sprintf("exited with code %d", j.exit)
	}
}

func (r *Runner) execTool(ctx context.Context, a map[string]any) Result {
	command := str(a, "command")
	if strings.TrimSpace(command) == "" {
		return fail("The command is empty.")
	}
	tty := boolArg(a, "tty")
	timeout := time.Duration(intArg(a, "timeout", 0)) * time.Second
	explicitTimeout := timeout > 0
	if !explicitTimeout {
		timeout = ExecDefaultTimeout
	}
	if timeout > ExecMaxTimeout {
		timeout = ExecMaxTimeout
	}
	yield := time.Duration(intArg(a, "yield_time_ms", -1)) * time.Millisecond
	background := yield >= 0 || tty
	if tty && yield < 0 {
		yield = ttyDefaultYield
	}
	if background {
		if n := r.runningJobs(); n >= MaxJobs {
			return fail(fmt.Sprintf("There are %d background jobs running, the most there may be; terminate one with exec_session first (list_exec_sessions shows them).", n))
		}
	}
	spec := relaySpec{Argv: []string{relayShell, "-lc", command}, Cwd: r.abs(str(a, "cwd")), TTY: tty}
	if tty {
		spec.Env = []string{"TERM=" + r.env.Term, fmt.Sprintf("COLUMNS=%d", ttyCols), fmt.Sprintf("LINES=%d", ttyRows)}
	}
	j, err := r.runRelay(spec, command)
	if err != nil {
		return fail(fmt.Sprintf("The command could not be started: %v.", err))
	}

	if !background {
		// Nothing will ever be written to a foreground command: a program
		// that reads its input gets the end of it at once instead of waiting
		// for its timeout.
		j.closeStdin()
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-j.done:
			return finishedResult(j, "")
		case <-timer.C:
			j.kill()
			<-j.done
			res := finishedResult(j, fmt.Sprintf("The command timed out after %s and was killed with everything it started.", timeout))
			res.OK = false
			return res
		case <-ctx.Done():
			return cancelledResult(j)
		}
	}

	timer := time.NewTimer(yield)
	defer timer.Stop()
	select {
	case <-j.done:
		res := finishedResult(j, "")
		res.TTY = tty
		return res
	case <-ctx.Done():
		res := cancelledResult(j)
		res.TTY = tty
		return res
	case <-timer.C:
	}
	id := r.addJob(j)
	if explicitTimeout {
		// A background job is bound by a timeout only when one was asked for.
		time.AfterFunc(timeout, j.kill)
	}
	out, errOut, dropped := j.take()
	var b strings.Builder
	kind := "background job"
	if tty {
		kind = "terminal session (80x24)"
	}
	fmt.Fprintf(&b, "The command is still running as %s %s. Use exec_session with session_id %q to read its output, send it input or terminate it.\n", kind, id, id)
	writeOutput(&b, out, errOut, dropped, tty)
	return Result{Text: strings.TrimRight(b.String(), "\n"), OK: true, TTY: tty}
}

// cancelledResult ends j, whose turn was cancelled before it finished, and
// describes it as interrupted.
func cancelledResult(j *job) Result {
	j.kill()
	<-j.done
	res := finishedResult(j, "The command was stopped before it finished: the turn was cancelled.")
	res.OK, res.Interrupted = false, true
	return res
}

// finishedResult describes a job that ended: its output, then its exit code.
func finishedResult(j *job, note string) Result {
	out, errOut, dropped := j.take()
	var b strings.Builder
	writeOutput(&b, out, errOut, dropped, j.tty)
	j.mu.Lock()
	code, waitErr, killed := j.exit, j.waitErr, j.killed
	j.mu.Unlock()
	if note != "" {
		b.WriteString(note)
		b.WriteByte('\n')
	}
	switch {
	case waitErr != nil:
		fmt.Fprintf(&b, "The relay failed: %v\n", waitErr)
	case killed:
	default:
		fmt.Fprintf(&b, "Exit code: %d\n", code)
	}
	return Result{Text: strings.TrimRight(b.String(), "\n"), OK: waitErr == nil && !killed && code == 0}
}

func writeOutput(b *strings.Builder, out, errOut string, dropped int, tty bool) {
	if dropped > 0 {
		fmt.Fprintf(b, "[%d bytes of older output were dropped: the job wrote more than %d MiB between two reads]\n", dropped, jobOutputCap>>20)
	}
	if out != "" {
		b.WriteString(out)
		if !strings.HasSuffix(out, "\n") {
			b.WriteByte('\n')
		}
	}
	if errOut != "" {
		b.WriteString("STDERR:\n")
		b.WriteString(errOut)
		if !strings.HasSuffix(errOut, "\n") {
			b.WriteByte('\n')
		}
	}
	if out == "" && errOut == "" {
		if tty {
			b.WriteString("(the screen shows nothing new)\n")
		} else {
			b.WriteString("(no output)\n")
		}
	}
}

func (r *Runner) addJob(j *job) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	j.id = fmt.Sprintf("s%d", r.nextID)
	r.jobs[j.id] = j
	return j.id
}

func (r *Runner) runningJobs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, j := range r.jobs {
		if !j.finished() {
			n++
		}
	}
	return n
}

func (r *Runner) execSession(ctx context.Context, a map[string]any) Result {
	id := str(a, "session_id")
	r.mu.Lock()
	j, found := r.jobs[id]
	r.mu.Unlock()
	if !found {
		return fail(fmt.Sprintf("There is no background job %q; list_exec_sessions shows them.", id))
	}
	res := Result{TTY: false}
	if boolArg(a, "terminate") {
		wasRunning := !j.finished()
		j.kill()
		select {
		case <-j.done:
		case <-ctx.Done():
			return Result{Text: "The job was being stopped when the turn was cancelled.", Interrupted: true}
		}
		r.forget(j)
		var b strings.Builder
		out, errOut, dropped := j.take()
		if wasRunning {
			fmt.Fprintf(&b, "Terminated %s with everything it started.\n", id)
		} else {
			fmt.Fprintf(&b, "%s had already ended (%s).\n", id, j.status())
		}
		if out != "" || errOut != "" || dropped > 0 {
			b.WriteString("Its last output:\n")
			writeOutput(&b, out, errOut, dropped, j.tty)
		}
		res.Text, res.OK = strings.TrimRight(b.String(), "\n"), true
		return res
	}
	if in := str(a, "input"); in != "" {
		if j.finished() {
			return fail(fmt.Sprintf("%s has ended (%s); it takes no input.", id, j.status()))
		}
		j.mu.Lock()
		closed := j.stdinClosed
		j.mu.Unlock()
		if closed {
			return fail(fmt.Sprintf("The input of %s was closed; it takes no more.", id))
		}
		if _, err := io.WriteString(j.stdin, in); err != nil {
			return fail(fmt.Sprintf("The input could not be written to %s: %v.", id, err))
		}
	}
	if boolArg(a, "close_stdin") {
		j.closeStdin()
	}
	wait := time.Duration(intArg(a, "yield_time_ms", int64(sessionDefaultYield/time.Millisecond))) * time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-j.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	var b strings.Builder
	out, errOut, dropped := j.take()
	writeOutput(&b, out, errOut, dropped, j.tty)
	if j.finished() {
		fmt.Fprintf(&b, "%s has ended: %s.\n", id, j.status())
		r.forget(j)
	} else {
		fmt.Fprintf(&b, "%s is still running.\n", id)
	}
	res.Text, res.OK = strings.TrimRight(b.String(), "\n"), true
	return res
}

// forget drops an ended job whose end the model has read.
func (r *Runner) forget(j *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs[j.id] == j {
		delete(r.jobs, j.id)
	}
}

func (r *Runner) listExecSessions() Result {
	r.mu.Lock()
	jobs := make([]*job, 0, len(r.jobs))
	for _, j := range r.jobs {
		jobs = append(jobs, j)
	}
	r.mu.Unlock()
	if len(jobs) == 0 {
		return ok("There are no background jobs.")
	}
	sort.Slice(jobs, func(a, b int) bool {
		return jobs[a].started.Before(jobs[b].started) || jobs[a].started.Equal(jobs[b].started) && jobs[a].id < jobs[b].id
	})
	now := r.env.Now()
	var b strings.Builder
	for _, j := range jobs {
		kind := ""
		if j.tty {
			kind = ", terminal"
		}
		fmt.Fprintf(&b, "%s: %s (%s%s, started %s ago): %s\n", j.id, j.status(), "job", kind, now.Sub(j.started).Round(time.Second), firstLine(j.command))
	}
	return ok(strings.TrimRight(b.String(), "\n"))
}
