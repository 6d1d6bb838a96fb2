package agentd

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The capabilities the daemon needs to act as another user (ref 4.1): change
// to it, and end a process group of its.
var neededCaps = []struct {
	name string
	bit  uint
}{
	{"CAP_SETUID", unix.CAP_SETUID},
	{"CAP_SETGID", unix.CAP_SETGID},
	{"CAP_KILL", unix.CAP_KILL},
}

// clearAmbient empties the ambient capability set of every thread, so no
// program the daemon starts holds one. AllThreadsSyscall needs a binary
// built without cgo (the product is); where it is refused, startClean still
// clears the set of the thread that forks each child.
func clearAmbient() error {
	_, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0)
	if e == syscall.ENOTSUP {
		return clearThreadAmbient()
	}
	if e != 0 {
		return fmt.Errorf("empty the ambient capability set: %w", e)
	}
	return nil
}

// clearThreadAmbient empties the calling thread's ambient set, and its
// inheritable set too, so a child holds nothing it could pass on.
func clearThreadAmbient() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("empty the ambient capability set: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read the thread's capabilities: %w", err)
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("empty the inheritable capability set: %w", err)
	}
	return nil
}

// startClean starts cmd from a thread whose ambient set has just been
// emptied: capabilities are per thread and the child inherits the forking
// thread's, so this holds even where clearAmbient could reach only one
// thread.
func startClean(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := clearThreadAmbient(); err != nil {
		return err
	}
	return cmd.Start()
}

// missingCaps names the capabilities of neededCaps the daemon's effective set
// lacks (read from /proc/self/status, the whole process's view).
func missingCaps() ([]string, error) {
	eff, err := procCapSet("CapEff")
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, c := range neededCaps {
		if eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	return missing, nil
}

// procCapSet reads one capability set ("CapEff", "CapPrm", "CapAmb") of this
// process.
func procCapSet(field string) (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			var n uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &n); err != nil {
				return 0, fmt.Errorf("parse %s %q: %w", field, v, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s line in /proc/self/status", field)
}

// shellOf returns the login shell /etc/passwd gives name, or "".
func shellOf(name string) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) == 7 && fields[0] == name {
			return fields[6]
		}
	}
	return ""
}
