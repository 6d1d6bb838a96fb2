// Command dots-launch starts a program as another user holding exactly the
// given capabilities as ambient ones: what systemd's User= and
// AmbientCapabilities= do for dot-agentd's unit in a golden image, for the
// test image, which has no systemd. It must run as root, and it is built
// without cgo so its uid change reaches every thread. --env-file adds the
// variables of an environment file, as the unit's EnvironmentFile=- does: a
// file that is not there adds nothing.
//
//	dots-launch --user dotagentd --caps setuid,setgid,kill [--env-file F] -- PROGRAM [ARGS...]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

var capByName = map[string]uint{
	"setuid": unix.CAP_SETUID,
	"setgid": unix.CAP_SETGID,
	"kill":   unix.CAP_KILL,
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dots-launch:", err)
		os.Exit(1)
	}
}

func run() error {
	// Capabilities are per thread: set them and exec from one.
	runtime.LockOSThread()
	name := flag.String("user", "", "the user to run as")
	capList := flag.String("caps", "", "comma-separated capabilities to keep (setuid, setgid, kill)")
	nnp := flag.Bool("no-new-privs", false, "set no_new_privs, so nothing started can gain a privilege (NoNewPrivileges=yes)")
	envFile := flag.String("env-file", "", "NAME=VALUE lines added to the program's environment; a missing file adds nothing (EnvironmentFile=-)")
	flag.Parse()
	argv := flag.Args()
	if *name == "" || len(argv) == 0 {
		return fmt.Errorf("usage: dots-launch --user NAME --caps a,b -- PROGRAM [ARGS...]")
	}
	var caps []uint
	for _, c := range strings.Split(*capList, ",") {
		if c == "" {
			continue
		}
		bit, ok := capByName[c]
		if !ok {
			return fmt.Errorf("unknown capability %q", c)
		}
		caps = append(caps, bit)
	}
	u, err := user.Lookup(*name)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1, 0); e != 0 {
		return fmt.Errorf("keep capabilities across the user change: %w", e)
	}
	groups := []int{gid}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.Atoi(g); err == nil && n != gid {
				groups = append(groups, n)
			}
		}
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	var mask uint32
	for _, c := range caps {
		mask |= 1 << c
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: mask, Permitted: mask, Inheritable: mask}}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	for _, c := range caps {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
			return fmt.Errorf("raise ambient capability %d: %w", c, err)
		}
	}
	if *nnp {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + u.HomeDir, "USER=" + *name, "LOGNAME=" + *name}
	if *envFile != "" {
		data, err := os.ReadFile(*envFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return fmt.Errorf("read %s: %w", *envFile, err)
		default:
			vars, err := protocol.ParseEngineEnv(data)
			if err != nil {
				return fmt.Errorf("%s: %w", *envFile, err)
			}
			env = append(env, vars...)
		}
	}
	return syscall.Exec(argv[0], argv, env)
}
