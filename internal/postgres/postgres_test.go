package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
)

// shared is one managed server for the tests that only need a database; each
// such test makes its own database on it.
var shared *Instance
var sharedHome string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if home := os.Getenv(helperHomeEnv); home != "" {
		return runHelper(home)
	}
	home, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)
	sharedHome = home
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shared, err = Start(ctx, Options{Home: home})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the shared test database:", err)
		return 1
	}
	code := m.Run()
	if err := shared.Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "stop the shared test database:", err)
		return 1
	}
	return code
}

// newDatabase makes an empty database on the shared server and returns a
// connection URL for it.
func newDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := strings.ToLower(strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	name = fmt.Sprintf("t_%d_%s", time.Now().UnixNano()%1e6, name)
	if len(name) > 60 {
		name = name[:60]
	}
	admin, err := pgx.Connect(ctx, shared.managed.dsn("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), shared.managed.dsn("postgres"))
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	return shared.managed.dsn(name)
}

// lines collects log messages.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.all = append(l.all, prefix+" "+args)
	}, funcr.Options{})
}

func (l *lines) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.all {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func TestManagedLifecycle(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()

	first := &lines{}
	inst, err := Start(ctx, Options{Home: home, Logger: first.logger()})
	if err != nil {
		t.Fatalf("first start: %v", err)
	}
	if !first.contains("initializing the PostgreSQL data directory") {
		t.Errorf("first start did not run initdb; log:\n%s", strings.Join(first.all, "\n"))
	}
	if _, err := os.Stat(filepath.Join(home, "db", "PG_VERSION")); err != nil {
		t.Errorf("no data directory after the first start: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "run", socketName)); err != nil {
		t.Errorf("no socket in run/: %v", err)
	}
	pid := inst.managed.cmd.Process.Pid
	if os.Geteuid() == 0 {
		// Root runs PostgreSQL as an unprivileged account that owns db/.
		assertRunsUnprivileged(t, pid, filepath.Join(home, "db"))
	}
	conn, err := pgx.Connect(ctx, inst.DSN())
	if err != nil {
		t.Fatal(err)
	}
	var listen string
	if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen); err != nil {
		t.Fatal(err)
	}
	if listen != "" {
		t.Errorf("listen_addresses = %q, want none (unix socket only)", listen)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE survives (v text); INSERT INTO survives VALUES ('kept')"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)

	// Stopped the way a server does on SIGTERM: with the context that
	// signal cancelled. The stop is still a clean one.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := inst.Stop(cancelled); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "db", "postmaster.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("postmaster.pid still there after a clean stop: %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("postgres pid %d still runs after stop", pid)
	}

	second := &lines{}
	inst, err = Start(ctx, Options{Home: home, Logger: second.logger()})
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	defer inst.Stop(ctx)
	if second.contains("initializing the PostgreSQL data directory") {
		t.Errorf("second start ran initdb again")
	}
	if os.Geteuid() == 0 {
		// t.TempDir's parent is 0700: the first start grants the account a
		// way through, once.
		if !first.contains("gave the PostgreSQL account search permission") {
			t.Errorf("first start as root did not say it changed an ACL")
		}
		if second.contains("gave the PostgreSQL account search permission") {
			t.Errorf("second start changed ACLs again")
		}
	}
	var v string
	if err := inst.Pool().QueryRow(ctx, "SELECT v FROM survives").Scan(&v); err != nil || v != "kept" {
		t.Errorf("row written before the restart: got %q, %v; want kept", v, err)
	}
}

func assertRunsUnprivileged(t *testing.T, pid int, dataDir string) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var uid string
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "Uid:" {
			uid = f[2] // effective
		}
	}
	info, err := os.Stat(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	owner := fmt.Sprint(info.Sys().(*syscall.Stat_t).Uid)
	if uid == "0" || uid != owner {
		t.Errorf("postgres runs as uid %s and %s belongs to uid %s; want one unprivileged account for both", uid, dataDir, owner)
	}
}

func TestSecondControlPlaneRefused(t *testing.T) {
	ctx := context.Background()
	// The shared instance holds its database's lock; a second control plane
	// on that database (another home, DATABASE_URL) is refused by name.
	_, err := Start(ctx, Options{Home: t.TempDir(), DatabaseURL: shared.DSN()})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second control plane: got %v, want ErrLocked", err)
	}
	t.Logf("refusal: %v", err)
	for _, want := range []string{fmt.Sprintf("pid %d", os.Getpid()), "home " + sharedHome} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name the holder (%s)", err, want)
		}
	}

	// Released, the lock goes to the next one.
	dsn := newDatabase(t)
	a, err := HoldInstanceLock(ctx, dsn, Holder{PID: 1, Host: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := HoldInstanceLock(ctx, dsn, Holder{PID: 2, Host: "b"}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid=1 host=a") {
		t.Errorf("second holder before any record: got %v, want ErrLocked naming pid=1 host=a", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := HoldInstanceLock(ctx, dsn, Holder{PID: 2, Host: "b"})
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	_ = b.Release(ctx)
}

func TestUnreachableDatabaseURL(t *testing.T) {
	tests := map[string]struct {
		url, host string
		timeout   time.Duration
	}{
		"closed port":               {url: "postgres://u:secret@127.0.0.1:1/db", host: "127.0.0.1:1"},
		"missing socket":            {url: "postgres://u:secret@/db?host=/nonexistent/invisible-dots", host: "/nonexistent/invisible-dots/.s.PGSQL.5432"},
		"non-routable (TEST-NET-1)": {url: "postgres://u:secret@192.0.2.1:5432/db", host: "192.0.2.1:5432", timeout: 2 * time.Second},
	}
	// A loopback listener that never accepts: the handshake completes in the
	// kernel and the server then never answers, like a firewalled proxy.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	tests["server that never answers"] = struct {
		url, host string
		timeout   time.Duration
	}{url: "postgres://u:secret@" + silent.Addr().String() + "/db", host: silent.Addr().String(), timeout: time.Second}

	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// No deadline here: the bound is Start's own.
			_, err := Start(context.Background(), Options{DatabaseURL: tc.url, ConnectTimeout: tc.timeout})
			if err == nil {
				t.Fatal("Start succeeded against an unreachable server")
			}
			t.Logf("error: %v", err)
			if !strings.Contains(err.Error(), tc.host) {
				t.Errorf("error %q does not name the host %s", err, tc.host)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestDefaultConnectTimeout(t *testing.T) {
	if diff := cmp.Diff(10*time.Second, DefaultConnectTimeout); diff != "" {
		t.Errorf("an unreachable DATABASE_URL must fail within 10 s (-want +got):\n%s", diff)
	}
}

func TestKineDSN(t *testing.T) {
	got := shared.KineDSN()
	if strings.Contains(got, "://") {
		t.Errorf("KineDSN() = %q; kine's driver adds the scheme itself", got)
	}
	// What kine's driver does with it must reach our database.
	conn, err := pgx.Connect(context.Background(), "postgres://"+got)
	if err != nil {
		t.Fatalf("connect with kine's form: %v", err)
	}
	defer conn.Close(context.Background())
	var db string
	if err := conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&db); err != nil || db != databaseName {
		t.Errorf("kine's form reaches database %q (%v), want %s", db, err, databaseName)
	}
	for in, want := range map[string]string{
		"postgresql://u@h/db": "u@h/db",
		"postgres://u@h/db":   "u@h/db",
	} {
		if got := kineForm(in); got != want {
			t.Errorf("kineForm(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScrub(t *testing.T) {
	tests := map[string]struct{ url, msg, want string }{
		"user password":  {url: "postgres://u:s3cr%40t@h/db", msg: "x s3cr@t y s3cr%40t", want: "x xxxxx y xxxxx"},
		"query password": {url: "postgres://u@h/db?password=hunter22", msg: "pw hunter22", want: "pw xxxxx"},
		"no password":    {url: "postgres://u@h/db", msg: "plain", want: "plain"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := scrub(errors.New(tc.msg), tc.url).Error()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scrub(%q) (-want +got):\n%s", tc.msg, diff)
			}
		})
	}
}

func TestVersionOrder(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "15", "13", "16", "notaversion"} {
		if err := os.MkdirAll(filepath.Join(root, v, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, d := range versionDirs(root) {
		rel, _ := filepath.Rel(root, d)
		got = append(got, rel)
	}
	want := []string{"16/bin", "15/bin", "13/bin", "9.6/bin"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("versionDirs (-want +got):\n%s", diff)
	}
	for in, want := range map[string]string{"15.14": "15", "9.6.24": "9.6", "17devel": "17", "16beta1": "16"} {
		if got, err := majorFromVersion(in); err != nil || got != want {
			t.Errorf("majorFromVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// helperHomeEnv makes the test binary a stand-in server: it starts the
// managed database on that home, prints the postgres pid and waits to be
// killed.
const helperHomeEnv = "INVISIBLE_DOTS_PGTEST_HELPER_HOME"

func runHelper(home string) int {
	inst, err := Start(context.Background(), Options{Home: home})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("postgres %d\n", inst.managed.cmd.Process.Pid)
	select {}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	// A bound on a wait, not a timing assertion: a fast shutdown of an idle
	// server takes well under a second.
	deadline := time.Now().Add(60 * time.Second)
	for !exited(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("postgres pid %d still runs", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCrashes runs on one home (one initdb): a killed server takes its
// postgres down, and a postgres that outlived an earlier server is stopped by
// the next one.
func TestCrashes(t *testing.T) {
	home := t.TempDir()
	t.Run("killed server takes postgres down", func(t *testing.T) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperHomeEnv+"="+home)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var pid int
		if _, err := fmt.Fscanf(out, "postgres %d\n", &pid); err != nil {
			_ = cmd.Process.Kill()
			t.Fatalf("the stand-in server did not report its postgres: %v", err)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		waitGone(t, pid)
	})
	t.Run("orphan stopped by the next server", func(t *testing.T) {
		ctx := context.Background()
		// An earlier server's postgres that never got its parent-death signal.
		orphan, err := startManaged(ctx, home, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		log := &lines{}
		inst, err := Start(ctx, Options{Home: home, Logger: log.logger()})
		if err != nil {
			_ = orphan.stop(ctx)
			t.Fatalf("start beside an orphan: %v", err)
		}
		defer inst.Stop(ctx)
		// Start returned once the orphan was a zombie; our own wait reaps it.
		select {
		case <-orphan.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("the orphan postgres (pid %d) still runs", orphan.cmd.Process.Pid)
		}
		if !log.contains("left running by an earlier server") {
			t.Errorf("no log line about the orphan:\n%s", strings.Join(log.all, "\n"))
		}
	})
}

func TestStrayDataDirectoryRefused(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "db", "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{Home: home})
	if err == nil || !strings.Contains(err.Error(), "not a PostgreSQL data directory") {
		t.Errorf("got %v, want a refusal to initdb over files that are not ours", err)
	}
	if b, _ := os.ReadFile(filepath.Join(home, "db", "notes.txt")); string(b) != "mine" {
		t.Errorf("the stray file was changed or removed")
	}
}
