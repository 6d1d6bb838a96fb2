package postgres

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// account is the operating-system account the managed PostgreSQL runs as.
type account struct {
	name     string
	uid, gid uint32
	// dropPrivileges is true when the server runs as root: postgres refuses to
	// run as root, so its children get this account's credentials.
	dropPrivileges bool
}

// dedicatedAccount is the system account created when the server runs as root
// on a host without a postgres account.
const dedicatedAccount = "invisible-dots"

// serverAccount picks the account the managed PostgreSQL runs as. A non-root
// server runs it as itself. A root server runs it as `postgres` when the
// distribution's package made that account (it exists for exactly this and
// owns nothing of ours), otherwise as a dedicated `invisible-dots` system
// account, created with useradd --system when missing. `nobody` is never used:
// files owned by it are shared with every other daemon that drops to it.
func serverAccount() (account, error) {
	if os.Geteuid() != 0 {
		return account{name: currentName(), uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}, nil
	}
	for _, name := range []string{"postgres", dedicatedAccount} {
		if a, err := lookupAccount(name); err == nil {
			return a, nil
		}
	}
	// --no-create-home and nologin: the account only owns the data directory.
	cmd := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
		"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
		"--comment", "invisible-dots managed PostgreSQL", dedicatedAccount)
	if out, err := cmd.CombinedOutput(); err != nil {
		return account{}, fmt.Errorf("create the system account %q to run PostgreSQL as (root may not): %v: %s; create it yourself or set DATABASE_URL",
			dedicatedAccount, err, out)
	}
	return lookupAccount(dedicatedAccount)
}

func lookupAccount(name string) (account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return account{}, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("account %s has a non-numeric uid %q", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("account %s has a non-numeric gid %q", name, u.Gid)
	}
	if uid == 0 {
		return account{}, fmt.Errorf("account %s is root; PostgreSQL refuses to run as root", name)
	}
	return account{name: name, uid: uint32(uid), gid: uint32(gid), dropPrivileges: true}, nil
}

func currentName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Geteuid())
}

// credential returns the SysProcAttr credential for the account's children,
// or nil when they run as the server itself.
func (a account) credential() *syscall.Credential {
	if !a.dropPrivileges {
		return nil
	}
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: []uint32{}}
}

// ensureOwned makes dir exist with mode 0700 and belong to the account, the
// way initdb and postgres require of a data directory. A directory left by an
// earlier account (the host gained a postgres account since) is handed over.
func (a account) ensureOwned(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	if !a.dropPrivileges {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		return a.own(path, d, err)
	})
}

// own gives one entry of the walk to the account. An entry that is gone by
// the time it is looked at is skipped: a postmaster left by a server that was
// killed may still be shutting down, removing postmaster.pid and temporary
// files as the walk passes them.
func (a account) own(path string, d fs.DirEntry, err error) error {
	if err == nil {
		var info fs.FileInfo
		if info, err = d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid == a.uid && st.Gid == a.gid {
				return nil
			}
			if err = os.Lchown(path, int(a.uid), int(a.gid)); err != nil {
				err = fmt.Errorf("give %s to account %s: %w", path, a.name, err)
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// ensureReachable lets the account reach dir: search permission on every
// ancestor, plus write permission on dir itself when write is set. It is
// needed when root runs the server with a home under /root (mode 0700): the
// account gets a POSIX ACL entry for itself alone, search only on ancestors
// (no listing), rather than opening the directories to every user.
//
// It returns the directories whose ACL it changed, for the log.
func (a account) ensureReachable(dir string, write bool) ([]string, error) {
	if !a.dropPrivileges {
		return nil, nil
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var changed []string
	want := uint16(aclExecute)
	if write {
		want = aclRead | aclWrite | aclExecute
	}
	for d, need := dir, want; ; d, need = filepath.Dir(d), uint16(aclExecute) {
		did, err := a.grant(d, need)
		if err != nil {
			return changed, err
		}
		if did {
			changed = append(changed, d)
		}
		if d == filepath.Dir(d) {
			return changed, nil
		}
	}
}

// grant gives the account perm on dir unless it already has it through the
// owner or "other" bits. Group membership is not consulted: the account's
// children run without supplementary groups.
func (a account) grant(dir string, perm uint16) (bool, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return false, fmt.Errorf("reach %s: %w", dir, err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return false, fmt.Errorf("reach %s: no unix ownership information", dir)
	}
	mode := uint16(info.Mode().Perm())
	switch {
	case st.Uid == a.uid && (mode>>6)&perm == perm:
		return false, nil
	case st.Uid != a.uid && st.Gid == a.gid && (mode>>3)&perm == perm:
		return false, nil
	case st.Uid != a.uid && st.Gid != a.gid && mode&perm == perm:
		return false, nil
	}
	if entries, err := readACL(dir); err == nil {
		// The entry counts only when the mask lets it through: a chmod of the
		// directory (the home's own start brings it back to 0700) rewrites the
		// mask and silently disables the entry.
		var entryPerm, maskPerm uint16
		hasEntry, hasMask := false, false
		for _, e := range entries {
			switch {
			case e.tag == aclUser && e.id == a.uid:
				entryPerm, hasEntry = e.perm, true
			case e.tag == aclMask:
				maskPerm, hasMask = e.perm, true
			}
		}
		if hasEntry && entryPerm&perm == perm && (!hasMask || maskPerm&perm == perm) {
			return false, nil // granted at an earlier start
		}
	}
	if err := addACLUser(dir, a.uid, perm); err != nil {
		if errors.Is(err, syscall.ENOTSUP) {
			return false, fmt.Errorf("let account %s reach %s: the file system has no ACL support; run `chmod o+x %s` or set INVISIBLE_DOTS_HOME under a directory it can reach, or DATABASE_URL",
				a.name, dir, dir)
		}
		return false, fmt.Errorf("let account %s reach %s: %w", a.name, dir, err)
	}
	return true, nil
}
