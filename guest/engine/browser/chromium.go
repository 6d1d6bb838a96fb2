package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A Chromium that dies under a living @playwright/mcp.
//
// @playwright/mcp launches Chromium itself and, when it loses it, answers the
// call that found out and launches a new one, on a blank page, at the next
// call: a click the model repeats would land on a page it never saw, and it
// would never be told (ref 6). The manager therefore watches the browser
// process itself, from the moment a launch opened it:
//
//   - It is found in /proc as the one process whose arguments hold
//     --user-data-dir=<the identity's profile> and no --type= (every child
//     of Chromium, the zygotes, renderers and utilities, has a --type=).
//     Playwright passes the profile as that one argument and Debian's
//     /usr/bin/chromium execs the real binary with its arguments kept.
//     /proc/<pid>/cmdline is readable by every user of the computer (the
//     image mounts /proc without hidepid), so the engine, a user apart from
//     dot, reads it without the relay.
//   - It is held by a pidfd (pidfd_open needs no right over the process),
//     opened before the arguments are read a second time, so a PID reused
//     between the scan and the open is never taken for the browser. The
//     pidfd turns readable when the process ends: the Go runtime's poller
//     wakes the watch at once, with no polling, and Alive asks it directly.
//
// Not chosen: the profile's SingletonLock symlink ("host-PID"), which
// headless Chromium never writes (the tests run headless) and which /home/dot
// (0750) keeps from the engine; and starting Chromium ourselves with
// @playwright/mcp connected by --cdp-endpoint, which opens a debugging port
// on the loopback that every user of the computer, the model's commands
// included, could drive outside the Dot's browser permissions, and leaves
// the flags, the pipe and the profile handling Playwright gives Chromium for
// us to copy.

// Process is an identity's running browser, as the manager watches it.
type Process interface {
	// Done is closed when the browser ended (never after Close).
	Done() <-chan struct{}
	// Alive asks now whether it still runs.
	Alive() bool
	// Close stops watching.
	Close()
}

// chromiumFindPatience is how long a launch looks for the browser it just
// opened: it runs by then (browser_tabs answered), so this only covers
// /proc catching up.
const chromiumFindPatience = 5 * time.Second

// WatchChromium finds the Chromium whose profile is profile and watches it
// (Options.Watch's default).
func WatchChromium(ctx context.Context, profile string) (Process, error) {
	return watchChromium(ctx, "/proc", profile, chromiumFindPatience)
}

func watchChromium(ctx context.Context, procRoot, profile string, patience time.Duration) (Process, error) {
	deadline := time.Now().Add(patience)
	for {
		pid, err := findChromium(procRoot, profile)
		if err == nil {
			var p Process
			if p, err = watchPID(pid, func() bool { return isChromium(procRoot, pid, profile) }); err == nil {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// chromiumArgs reads a process's arguments; nil when it is gone or hidden.
func chromiumArgs(procRoot string, pid int) []string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
}

// isChromium is whether pid is the browser process (not one of its
// children) of profile.
func isChromium(procRoot string, pid int, profile string) bool {
	args := chromiumArgs(procRoot, pid)
	found := false
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--type="):
			return false
		case a == "--user-data-dir="+profile:
			found = true
		}
	}
	return found
}

// findChromium is the browser process of profile. Should two match (a
// browser that execs another), the one whose parent is not among them.
func findChromium(procRoot, profile string) (int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", procRoot, err)
	}
	parents := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isChromium(procRoot, pid, profile) {
			continue
		}
		parents[pid] = parentOf(procRoot, pid)
	}
	for pid, ppid := range parents {
		if _, ok := parents[ppid]; !ok {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no Chromium runs with --user-data-dir=%s", profile)
}

// parentOf reads the parent's PID from /proc/<pid>/stat, after the command's
// name (which may hold spaces and parentheses).
func parentOf(procRoot string, pid int) int {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// pidWatch is a process held by its pidfd.
type pidWatch struct {
	pid    int
	f      *os.File
	done   chan struct{}
	closed chan struct{}
	once   sync.Once
	ended  chan struct{} // the watching goroutine returned
}

// watchPID opens a pidfd of pid and checks with same that pid is still the
// process it was found as (a PID reused before the open is refused).
func watchPID(pid int, same func() bool) (*pidWatch, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open of %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid))
	if !same() {
		f.Close()
		return nil, fmt.Errorf("process %d ended before it could be watched", pid)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	w := &pidWatch{pid: pid, f: f, done: make(chan struct{}), closed: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		// The runtime's poller calls the function again each time the pidfd
		// turns readable, which it does once, when the process ends.
		err := rc.Read(func(fd uintptr) bool { return exited(int(fd)) })
		for err != nil {
			// Closed, or a pidfd the poller does not take: then ask it
			// twice a second.
			select {
			case <-w.closed:
				return
			case <-time.After(500 * time.Millisecond):
			}
			if !w.Alive() {
				err = nil
			}
		}
		select {
		case <-w.closed:
		default:
			close(w.done)
		}
	}()
	return w, nil
}

// exited polls a pidfd without waiting: readable is ended.
func exited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents != 0
	}
}

func (w *pidWatch) Done() <-chan struct{} { return w.done }

func (w *pidWatch) Alive() bool {
	select {
	case <-w.done:
		return false
	case <-w.closed:
		return false
	default:
	}
	var dead bool
	rc, err := w.f.SyscallConn()
	if err != nil {
		return false
	}
	if err := rc.Control(func(fd uintptr) { dead = exited(int(fd)) }); err != nil {
		return false
	}
	return !dead
}

func (w *pidWatch) Close() {
	w.once.Do(func() {
		close(w.closed)
		w.f.Close()
		<-w.ended
	})
}
