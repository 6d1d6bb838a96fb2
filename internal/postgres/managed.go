package postgres

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

const (
	// superuser is the role initdb makes; the socket's directory, not a
	// password, keeps others out (see initdb's --auth-local below).
	superuser = "postgres"
	// databaseName is the database our tables and kine's share.
	databaseName = "invisible_dots"
	// socketName is the file postgres creates in the socket directory for the
	// default port; with listen_addresses='' the port only names the file.
	socketName = ".s.PGSQL.5432"
	// maxSocketPath is sun_path's size on Linux less the terminating NUL.
	maxSocketPath = 107
	// readyTimeout bounds how long a fresh postgres may take to accept
	// connections (crash recovery of a large WAL can take a while).
	readyTimeout = 2 * time.Minute
)

// managed is a PostgreSQL server we started as our child.
type managed struct {
	dataDir, runDir string
	log             logr.Logger

	cmd    *exec.Cmd
	exited chan struct{} // closed when the child has been waited for
	err    error         // the child's exit status, set before exited closes
	tail   *tailBuffer
}

// startManaged brings up the managed instance under homeDir: initdb on first
// start, then postgres on a unix socket in homeDir/run only.
func startManaged(ctx context.Context, homeDir string, log logr.Logger) (*managed, error) {
	h, err := home.New(homeDir)
	if err != nil {
		return nil, err
	}
	homeDir, dataDir, runDir := h.Root, h.DB(), h.Run()
	if err := os.MkdirAll(homeDir, 0o700); err != nil {
		return nil, fmt.Errorf("create the home %s: %w", homeDir, err)
	}
	if sock := filepath.Join(runDir, socketName); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("the PostgreSQL socket path %s is %d bytes, longer than the %d a unix socket allows: choose a shorter INVISIBLE_DOTS_HOME or set DATABASE_URL",
			sock, len(sock), maxSocketPath)
	}
	if strings.ContainsAny(runDir, `",`) {
		return nil, fmt.Errorf("the home %s contains a comma or a double quote, which PostgreSQL's socket directory list cannot carry: choose another INVISIBLE_DOTS_HOME", homeDir)
	}

	wantMajor := ""
	if b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION")); err == nil {
		wantMajor = strings.TrimSpace(string(b))
	}
	binDir, err := findBinDir(wantMajor)
	if err != nil {
		return nil, err
	}
	acct, err := serverAccount()
	if err != nil {
		return nil, err
	}
	granted, err := acct.ensureReachable(homeDir, false)
	if err != nil {
		return nil, err
	}
	// A postgres left by an earlier server that was killed may still run on
	// the data directory: stop it before its files are walked and handed to
	// the account.
	if wantMajor != "" {
		if err := stopOrphan(ctx, dataDir, runDir, log); err != nil {
			return nil, err
		}
	}
	if err := acct.ensureOwned(dataDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", runDir, err)
	}
	grantedRun, err := acct.ensureReachable(runDir, true)
	if err != nil {
		return nil, err
	}
	if granted = append(granted, grantedRun...); len(granted) > 0 {
		// A lasting change outside db/: say so once, when it is made.
		log.Info("gave the PostgreSQL account search permission (a POSIX ACL entry for it alone) on the way to its directories",
			"account", acct.name, "directories", granted)
	}

	if wantMajor == "" {
		log.Info("initializing the PostgreSQL data directory", "dir", dataDir, "binaries", binDir, "account", acct.name)
		if err := initdb(ctx, binDir, dataDir, acct); err != nil {
			return nil, err
		}
	}
	var m *managed
	for attempt := 1; ; attempt++ {
		if err := stopOrphan(ctx, dataDir, runDir, log); err != nil {
			return nil, err
		}
		m = &managed{dataDir: dataDir, runDir: runDir, log: log, exited: make(chan struct{}), tail: newTailBuffer(30)}
		if err := m.start(binDir, acct); err != nil {
			return nil, err
		}
		err := m.waitReady(ctx)
		if err == nil {
			break
		}
		_ = m.stop(context.Background())
		// An earlier server's postgres that was still shutting down when
		// it was looked for holds its lock files a moment longer: look
		// again.
		if attempt == 5 || !strings.Contains(m.tail.String(), "already exists") {
			return nil, err
		}
		log.Info("an earlier PostgreSQL on this home still holds its lock files; starting again", "attempt", attempt)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err := ensureDatabase(ctx, m.dsn(superuser), databaseName); err != nil {
		_ = m.stop(context.Background())
		return nil, err
	}
	log.Info("PostgreSQL is ready", "socketDir", runDir, "pid", m.cmd.Process.Pid, "account", acct.name)
	return m, nil
}

// childEnv is the whole environment of initdb and postgres: nothing of ours
// (tokens, DATABASE_URL) leaks into them.
func childEnv() []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
}

func initdb(ctx context.Context, binDir, dataDir string, acct account) error {
	if entries, err := os.ReadDir(dataDir); err != nil {
		return fmt.Errorf("read %s: %w", dataDir, err)
	} else if len(entries) > 0 {
		return fmt.Errorf("%s holds files but no PG_VERSION, so it is not a PostgreSQL data directory: move it away and start again", dataDir)
	}
	// --auth-local=trust: only the server's user and the account can enter the
	// socket's directory (mode 0700 plus the account's ACL entry), so the
	// file system is the authentication. TCP is never listened on, and
	// refused should it ever be turned on.
	cmd := exec.CommandContext(ctx, program(binDir, "initdb"),
		"--pgdata="+dataDir, "--username="+superuser, "--encoding=UTF8", "--no-locale",
		"--auth-local=trust", "--auth-host=reject")
	cmd.Dir = "/"
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: acct.credential()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		// The directory was empty before: empty it again, so the next start
		// runs initdb afresh instead of failing on its leftovers.
		if entries, rerr := os.ReadDir(dataDir); rerr == nil {
			for _, e := range entries {
				_ = os.RemoveAll(filepath.Join(dataDir, e.Name()))
			}
		}
		return fmt.Errorf("initdb %s as %s failed: %w\n%s", dataDir, acct.name, err, lastLines(string(out), 20))
	}
	return nil
}

// start runs postgres as our child. Not pg_ctl: pg_ctl daemonizes, and a
// daemon outlives a server that was killed. The child gets its own process
// group (a Ctrl-C at the terminal reaches only us; we stop it last, after the
// API server that uses it) and SIGINT, PostgreSQL's fast shutdown, when we
// die without stopping it.
func (m *managed) start(binDir string, acct account) error {
	socketDir := m.runDir
	if strings.ContainsAny(socketDir, " \t") {
		socketDir = `"` + socketDir + `"`
	}
	cmd := exec.Command(program(binDir, "postgres"),
		"-D", m.dataDir,
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories="+socketDir,
		"-c", "unix_socket_permissions=0700",
		"-c", "logging_collector=off",
		"-c", "log_destination=stderr",
		// A failed statement is its client's to report: kine's expected
		// unique-key retries would otherwise print three lines each. LOG
		// ranks above ERROR for the server log, so start, stop and FATAL
		// lines still show.
		"-c", "log_min_messages=log",
		"-c", "log_min_error_statement=panic",
		// Nothing here replicates: without workers for it PostgreSQL starts
		// no logical replication launcher, a process (about 1 MiB) fewer.
		"-c", "max_logical_replication_workers=0",
		// A single person's control plane: a database of tens of MiB
		// (1000 Dots and their logs are about 60), read mostly by its
		// recent rows. initdb's 128 MB of shared buffers fill with
		// whatever a start's lists read and stay, counted in every
		// PostgreSQL process's memory; the kernel's page cache, which
		// gives memory back when the machine needs it, keeps the rest.
		"-c", "shared_buffers="+sharedBuffers,
	)
	cmd.Dir = "/"
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: acct.credential(),
		Setpgid:    true,
		Pdeathsig:  syscall.SIGINT,
	}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	// Every process postgres starts inherits its output: Wait, which waits
	// for that output's end, would wait for the last of them, and a
	// postmaster killed with SIGKILL can leave one running for minutes (a
	// backend in COPY TO PROGRAM waits for its program). The postmaster's
	// own exit is what counts; its output is read for a moment more.
	cmd.WaitDelay = orphanOutputWait
	go m.relay(pr)

	started := make(chan error, 1)
	// The parent-death signal fires when the thread that forked the child
	// exits, not the process: keep that thread for the child's whole life.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			_ = pw.Close()
			return
		}
		started <- nil
		m.err = cmd.Wait()
		if errors.Is(m.err, exec.ErrWaitDelay) {
			m.err = nil // exited well; only its output was held
		}
		// A postmaster that exits on a shutdown has stopped its processes
		// first; one that was killed or crashed leaves them to us. Most
		// end by themselves on its death, but one that waits on something
		// else (a program) holds the shared memory and stops the next
		// start ("pre-existing shared memory block is still in use") for
		// as long as it waits. They are of no use without it, so they are
		// killed, as the postmaster itself kills its processes when one
		// crashes.
		if n := killLeftBackends(cmd.Path, m.dataDir); n > 0 {
			m.log.Info("killed the processes the exited PostgreSQL left running on its data directory", "processes", n)
		}
		_ = pw.Close()
		close(m.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start %s: %w", program(binDir, "postgres"), err)
	}
	m.cmd = cmd
	return nil
}

// sharedBuffers is the managed PostgreSQL's shared_buffers (see start).
const sharedBuffers = "16MB"

// orphanOutputWait is how long the postmaster's output is read after it
// exited, while processes it left still hold it.
const orphanOutputWait = time.Second

// relay turns postgres's output into log lines and keeps the last ones for
// error messages.
func (m *managed) relay(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		m.tail.add(line)
		m.log.Info(line)
	}
	_, _ = io.Copy(io.Discard, r)
}

func (m *managed) dsn(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Path:     "/" + database,
		RawQuery: url.Values{"host": {m.runDir}, "sslmode": {"disable"}}.Encode(),
	}
	return u.String()
}

func (m *managed) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attempt, m.dsn("postgres"))
		cancelAttempt()
		if err == nil {
			return conn.Close(ctx)
		}
		lastErr = err
		select {
		case <-m.exited:
			return fmt.Errorf("postgres exited while starting (%v); its last lines:\n%s", m.err, m.tail.String())
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections on %s: %v; its last lines:\n%s", m.runDir, lastErr, m.tail.String())
		case <-tick.C:
		}
	}
}

// stop asks for a fast shutdown (sessions are ended, everything committed is
// kept), then an immediate one, then kills.
func (m *managed) stop(ctx context.Context) error {
	if m.cmd == nil || m.cmd.Process == nil {
		return nil
	}
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, 60 * time.Second}, {syscall.SIGQUIT, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}}
	for i, step := range steps {
		select {
		case <-m.exited:
			return m.exitError(i)
		default:
		}
		_ = m.cmd.Process.Signal(step.sig)
		timer := time.NewTimer(step.wait)
		select {
		case <-m.exited:
			timer.Stop()
			return m.exitError(i + 1)
		case <-ctx.Done():
			timer.Stop()
		case <-timer.C:
		}
	}
	select {
	case <-m.exited:
		return m.exitError(len(steps))
	case <-time.After(10 * time.Second):
		return fmt.Errorf("postgres (pid %d) did not exit after SIGKILL", m.cmd.Process.Pid)
	}
}

// exitError says how the child ended once signals up to steps were sent.
func (m *managed) exitError(signalsSent int) error {
	if signalsSent <= 1 && m.err == nil {
		return nil
	}
	if signalsSent <= 1 {
		return fmt.Errorf("postgres exited with %v; its last lines:\n%s", m.err, m.tail.String())
	}
	return fmt.Errorf("postgres did not stop on a fast shutdown and was stopped harder (%v); the next start runs crash recovery", m.err)
}

// stopOrphan stops a postgres still running on dataDir. The caller holds
// server.lock, so such a process is a leftover of an earlier server on this
// home (one that was killed before its child got the parent-death signal),
// never another server's. A postmaster.pid whose process is gone or is not
// postgres on this directory is left to postgres, which ignores stale ones.
func stopOrphan(ctx context.Context, dataDir, runDir string, log logr.Logger) error {
	// A postmaster shutting down removes postmaster.pid before it exits, and
	// keeps its socket's lock file until the end: a server restarted at once
	// after a kill -9 finds only the latter, and PostgreSQL would refuse to
	// start ("lock file ... already exists"). Both name the postmaster.
	for _, f := range []string{filepath.Join(dataDir, "postmaster.pid"), filepath.Join(runDir, socketName+".lock")} {
		if err := stopOrphanNamedIn(ctx, f, dataDir, log); err != nil {
			return err
		}
	}
	return nil
}

// stopOrphanNamedIn stops the postmaster whose pid is the first line of
// file, if it runs in dataDir, and waits for it to exit.
func stopOrphanNamedIn(ctx context.Context, file, dataDir string, log logr.Logger) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return nil
	}
	if exited(pid) {
		// The postmaster is gone, or a zombie its new parent has not reaped
		// yet: PostgreSQL counts a zombie as alive and would refuse to
		// start on the lock file naming it. Nothing but an earlier server
		// of this home writes it (the caller holds server.lock).
		if err := os.Remove(file); err == nil {
			log.Info("removed a lock file left by a PostgreSQL that has exited", "file", file, "pid", pid)
		}
		return nil
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return nil
	}
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil || cwd != want {
		return nil
	}
	log.Info("stopping a PostgreSQL left running by an earlier server on this home", "pid", pid)
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	_ = proc.Signal(syscall.SIGINT)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if exited(pid) {
			// A zombie's lock file is stale (see above).
			_ = os.Remove(file)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("a PostgreSQL (pid %d) left by an earlier server still runs on %s and did not stop: stop it and start again", pid, dataDir)
}

// killLeftBackends kills the processes of the postgres program at bin that
// run on dataDir (a backend's working directory is its data directory),
// and says how many. Each backend leads its own process group, so the
// postmaster's group does not name them.
func killLeftBackends(bin, dataDir string) int {
	bin, errBin := filepath.EvalSymlinks(bin)
	dir, errDir := filepath.EvalSymlinks(dataDir)
	entries, err := os.ReadDir("/proc")
	if errBin != nil || errDir != nil || err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if exe == bin && cwd == dir && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// exited reports whether pid is gone or a zombie: a zombie holds no files and
// no shared memory, only a slot its parent has yet to reap.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold spaces or parentheses.
	rest := string(b)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	return len(f) > 0 && f[0] == "Z"
}

func ensureDatabase(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to the managed PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// tailBuffer keeps the last n lines written to it.
type tailBuffer struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func newTailBuffer(n int) *tailBuffer { return &tailBuffer{n: n} }

func (t *tailBuffer) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
