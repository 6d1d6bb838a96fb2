package qemu

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procInfo is what /proc says about a pid.
type procInfo struct {
	// Exists is false when there is no such process, or only its zombie.
	Exists bool
	// StartTicks is the start time in clock ticks since boot.
	StartTicks uint64
	// UID owns the process.
	UID int
}

// readProc reads /proc/<pid>/stat and the owner of /proc/<pid>.
func readProc(pid int) (procInfo, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return procInfo{}, nil
	}
	if err != nil {
		return procInfo{}, fmt.Errorf("read %s/stat: %w", dir, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself: the fields after it start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procInfo{}, fmt.Errorf("%s/stat does not parse", dir)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procInfo{}, fmt.Errorf("%s/stat has %d fields after the name, want at least 20", dir, len(f))
	}
	if f[0] == "Z" || f[0] == "X" {
		// A zombie has exited; only its parent's wait is missing.
		return procInfo{}, nil
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procInfo{}, fmt.Errorf("%s/stat start time %q: %w", dir, f[19], err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return procInfo{}, nil
		}
		return procInfo{}, err
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	return procInfo{Exists: true, StartTicks: start, UID: uid}, nil
}

// signalable reports whether kill(pid, 0) succeeds: false with EPERM for
// another user's process (ref 3.4).
func signalable(pid int) (bool, error) {
	err := syscall.Kill(pid, 0)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.ESRCH):
		return false, nil
	default:
		return false, err
	}
}

// portAccepts reports whether something accepts a TCP connection on
// 127.0.0.1:port. QEMU's user networking listens on the guest port from the
// moment it is set up until the process exits, whether the guest is up or
// not.
//
// QEMU's user networking listens with a backlog of one and accepts from its
// main loop, so a connect made while that loop is busy (TCG, a loaded host)
// can have its SYN dropped; the kernel retries it after a second. Measured: 1
// in 300 connects timed out at 500 ms. A false "not listening" would make a
// VM ERROR, so the connect gets time for the retry, and a second try. A
// refused connection (nothing listens) answers at once.
func portAccepts(port int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for try := 0; try < 2; try++ {
		c, err := net.DialTimeout("tcp", addr, 2500*time.Millisecond)
		if err == nil {
			c.Close()
			return true
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return false
		}
	}
	return false
}

// freePort picks a free TCP port on 127.0.0.1: bind to port 0, read it,
// release it (ref 3.5). Another process may take it before QEMU does; the
// start retries when QEMU says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
