package e2e

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/pidlock"
)

// A stop signal soon after the server is ready stops it in order (ref 11):
// the controllers and the host agent, then the control plane, then its
// PostgreSQL, last; nothing overruns its bound (no part names itself, no
// goroutine dump), the database is shut down and server.lock is free. The
// time is a figure, not an assertion.
func TestStopIsOrderedAndLeavesNothing(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			h, err := home.New(newHome(t))
			if err != nil {
				t.Fatal(err)
			}
			s := startServer(t, h.Root)
			b, err := os.ReadFile(h.DB() + "/postmaster.pid")
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			postmaster, err := strconv.Atoi(strings.TrimSpace(first))
			if err != nil {
				t.Fatalf("postmaster.pid: %q", b)
			}
			// Soon after ready: the moment the stop used to take half a minute.
			time.Sleep(2 * time.Second)
			sent := time.Now()
			if err := s.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if !s.exited(60 * time.Second) {
				t.Fatalf("the server did not stop within 60 s of %s:\n%s", sig, s.logTail(40))
			}
			t.Logf("FIGURE %s to exit, 2 s after ready: %v", sig, time.Since(sent).Round(time.Millisecond))
			if s.waitErr != nil {
				t.Errorf("the server exited with %v after %s; want 0", s.waitErr, sig)
			}
			log := readFile(s.logPath)
			at := func(line string) int {
				i := strings.Index(log, line)
				if i < 0 {
					t.Errorf("the log has no %q:\n%s", line, s.logTail(40))
				}
				return i
			}
			order := []string{"signal received, shutting down", "stopping the control plane", "PostgreSQL stopped", "Z INFO stopped\n"}
			for i := 1; i < len(order); i++ {
				if a, b := at(order[i-1]), at(order[i]); a > b {
					t.Errorf("%q came after %q; want the stop in order", order[i-1], order[i])
				}
			}
			if strings.Contains(log, "Wait completed, proceeding to shutdown the manager") &&
				strings.LastIndex(log, "Wait completed, proceeding to shutdown the manager") > at("stopping the control plane") {
				t.Errorf("a controller manager finished after the control plane began to stop")
			}
			// A clean stop logs no error: nothing failed. But for one
			// upstream family: a controller's request still in flight when
			// its manager stops is cancelled by it, which the API server
			// logs as its handler's timeout (five lines of "Handler
			// timeout" and "post-timeout activity").
			for _, line := range strings.Split(log, "\n") {
				stamp, rest, _ := strings.Cut(line, " ")
				logged, err := time.Parse(time.RFC3339Nano, stamp)
				cancelled := strings.Contains(rest, "Handler timeout") || strings.Contains(strings.ToLower(rest), "post-timeout activity")
				if err == nil && !logged.Before(sent.Add(-time.Second)) && strings.HasPrefix(rest, "ERROR ") && !cancelled {
					t.Errorf("the stop logged an error: %s", line)
				}
			}
			for _, overrun := range []string{"did not stop", "goroutine profile:", "stopping its storage anyway"} {
				if strings.Contains(log, overrun) {
					t.Errorf("the stop overran a bound (%q in the log):\n%s", overrun, s.logTail(60))
				}
			}
			if !exited(postmaster) {
				t.Errorf("PostgreSQL (pid %d) still runs after the server exited", postmaster)
			}
			if _, err := os.Stat(h.DB() + "/postmaster.pid"); !os.IsNotExist(err) {
				t.Errorf("postmaster.pid is still there (%v): the database was not shut down cleanly", err)
			}
			l, err := pidlock.Acquire(h.ServerLock(), pidlock.Options{})
			if err != nil {
				t.Fatalf("server.lock is not free after the stop: %v", err)
			}
			_ = l.Release()
		})
	}
}

// exited reports whether pid is gone. The postmaster is the server's own
// child, which the server waits for before it says "PostgreSQL stopped", so
// it is no zombie by then.
func exited(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }
