package agentd

import (
	"fmt"
	"os/user"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Identity is the account the work runs as: its uid, gid, supplementary
// groups and the environment entries of its account. A nil *Identity is the
// development mode: work runs as the daemon's own user.
type Identity struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32
	Home   string
	Shell  string
}

// LookupIdentity reads the account name from the system's user and group
// databases (pure Go: /etc/passwd and /etc/group, as the static binary has no
// libc). The daemon's own groups are never added.
func LookupIdentity(name string) (*Identity, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("look up the user %q the work runs as (create it, or pass --run-as \"\" for development): %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has a non-numeric uid %q", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has a non-numeric gid %q", name, u.Gid)
	}
	id := &Identity{Name: name, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir, Shell: "/bin/sh"}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("read the groups of user %q: %w", name, err)
	}
	for _, g := range gids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("user %q is in a group with a non-numeric id %q", name, g)
		}
		id.Groups = append(id.Groups, uint32(n))
	}
	if sh := shellOf(name); sh != "" {
		id.Shell = sh
	}
	return id, nil
}

// credential is what a child process of this identity starts with.
func (id *Identity) credential() *syscall.Credential {
	if id == nil {
		return nil
	}
	return &syscall.Credential{Uid: id.UID, Gid: id.GID, Groups: append([]uint32(nil), id.Groups...)}
}

// asUser runs fn on a thread of its own whose file-system user and groups
// are the identity's, the way an NFS server serves a client: every open,
// create and rename in fn is checked as that user and what it creates is the
// user's. The thread is never handed back to the Go scheduler (the goroutine
// ends locked), so no other goroutine ever runs with those credentials.
// With a nil identity fn runs as the daemon itself.
func asUser[T any](id *Identity, fn func() (T, error)) (T, error) {
	if id == nil {
		return fn()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread exits with this goroutine.
		if err := setThreadFSUser(id); err != nil {
			var zero T
			ch <- result{zero, err}
			return
		}
		v, err := fn()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

// setThreadFSUser changes the calling thread's supplementary groups, fsgid
// and fsuid. Go's syscall.Setgroups changes every thread, so setgroups is
// called raw; setfsuid and setfsgid are per-thread by nature. Each is read
// back, because setfsuid reports no error when it is refused.
func setThreadFSUser(id *Identity) error {
	groups := make([]uint32, len(id.Groups))
	copy(groups, id.Groups)
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("act as %s: set supplementary groups (the daemon needs CAP_SETGID): %w", id.Name, e)
	}
	unix.Setfsgid(int(id.GID))
	if prev, _ := unix.SetfsgidRetGid(-1); prev != int(id.GID) {
		return fmt.Errorf("act as %s: the kernel refused file-system group %d (the daemon needs CAP_SETGID)", id.Name, id.GID)
	}
	unix.Setfsuid(int(id.UID))
	if prev, _ := unix.SetfsuidRetUid(-1); prev != int(id.UID) {
		return fmt.Errorf("act as %s: the kernel refused file-system user %d (the daemon needs CAP_SETUID)", id.Name, id.UID)
	}
	return nil
}
