package setup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// KVMDevice is the accelerator's device.
const KVMDevice = "/dev/kvm"

// KVMFor returns a doctor.Deps.OpenKVM that checks /dev/kvm for u while the
// process is root (setup under sudo), where opening it ourselves always
// succeeds and says nothing about the person who runs the server.
//
// What it does: it runs test(1) as u (uid, gid and the supplementary groups
// the account database gives u, through SysProcAttr.Credential) asking
// whether /dev/kvm is readable and writable, which is the kernel's own
// access check, ACLs included (udev's uaccess ACL, say), rather than our
// reading of the mode bits. One difference from the person's own shell: a
// group just added with usermod counts here before the person logs in again
// and their session gets it; doctor, run as the person, tells that apart.
// A missing /dev/kvm is os.ErrNotExist, as doctor's own check gives it.
func KVMFor(u *user.User) func() error {
	return func() error { return readWriteFor(u, KVMDevice) }
}

// readWriteFor says whether u may read and write path.
func readWriteFor(u *user.User, path string) error {
	if _, err := os.Stat(path); err != nil {
		return err
	}
	cred, err := credential(u)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(context.Background(), "test", "-r", path, "-a", "-w", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return &os.PathError{Op: "open as " + u.Username, Path: path, Err: os.ErrPermission}
	}
	if err != nil {
		return fmt.Errorf("check %s for %s: %w", path, u.Username, err)
	}
	return nil
}

// credential is u's uid, gid and groups.
func credential(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("the groups of %s: %w", u.Username, err)
	}
	for _, g := range ids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			continue
		}
		cred.Groups = append(cred.Groups, uint32(n))
	}
	return cred, nil
}
