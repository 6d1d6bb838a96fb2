package home

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
)

// Person is whom setup and image build act for: the person who runs the
// server (DESIGN.md 5, "builds run as the person who runs the server"). Run as
// a normal user they act for that user, who calls sudo for the one step that
// needs root. Run under sudo they act for SUDO_USER: that user's home, and
// what they write there is given back to that user. Run as root with no
// SUDO_USER they act for root, and say so.
type Person struct {
	// Name is the login name ("" when the environment does not say).
	Name string
	// Home is the person's INVISIBLE_DOTS_HOME.
	Home Layout
	// User is the person's account when the process is root acting for
	// another user (sudo): its ids, its home directory, its groups.
	User *user.User
	// UID and GID own what the process writes for the person; meaningful
	// when GiveBack.
	UID, GID int
	// GiveBack: the process runs as root for another user, so what it
	// writes in Home is given back to UID:GID (GiveBackTree, GiveBackFile).
	GiveBack bool
	// Root: root with no SUDO_USER, acting for root itself.
	Root bool
	// Note is the one line to print about whom this acts for ("" when it
	// is the person running it, as usual).
	Note string
}

// ForPerson decides whom setup and image build act for. It is the one place
// that does: getenv is the process's environment (os.Getenv), euid its
// effective user id (os.Geteuid) and lookup finds an account by login name
// (user.Lookup).
//
//   - Not root: the user running it, in INVISIBLE_DOTS_HOME or
//     $HOME/.invisible-dots, as every other command.
//   - Root with SUDO_USER naming a user other than root: that user, in
//     INVISIBLE_DOTS_HOME when it reached the process (sudo drops it unless
//     told to keep it) and else in the user's own home directory from the
//     account database (sudo sets HOME to root's); what is written there is
//     given back to the user.
//   - Root with no SUDO_USER: root, in root's home, with a Note that says so.
func ForPerson(getenv func(string) string, euid int, lookup func(string) (*user.User, error)) (Person, error) {
	sudoUser := getenv("SUDO_USER")
	if euid != 0 || sudoUser == "" || sudoUser == "root" {
		h, err := homeFrom(getenv, getenv("HOME"))
		if err != nil {
			return Person{}, err
		}
		p := Person{Name: getenv("USER"), Home: h}
		if euid == 0 {
			p.Root = true
			if p.Name == "" {
				p.Name = "root"
			}
			p.Note = fmt.Sprintf("running as root with no SUDO_USER: acting for root, in %s (the server must then run as root too; run this as the person who runs the server to act for them)", h.Root)
		}
		return p, nil
	}
	u, err := lookup(sudoUser)
	if err != nil {
		return Person{}, fmt.Errorf("SUDO_USER=%s: no such user here: %w", sudoUser, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return Person{}, fmt.Errorf("SUDO_USER=%s: user id %q is not a number", sudoUser, u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return Person{}, fmt.Errorf("SUDO_USER=%s: group id %q is not a number", sudoUser, u.Gid)
	}
	if u.HomeDir == "" && getenv(EnvHome) == "" {
		return Person{}, fmt.Errorf("SUDO_USER=%s has no home directory in the account database: pass %s", sudoUser, EnvHome)
	}
	h, err := homeFrom(getenv, u.HomeDir)
	if err != nil {
		return Person{}, err
	}
	return Person{
		Name: sudoUser, Home: h, User: u, UID: uid, GID: gid, GiveBack: true,
		Note: fmt.Sprintf("running under sudo: acting for %s, in %s (what is written there is %s's)", sudoUser, h.Root, sudoUser),
	}, nil
}

// homeFrom is INVISIBLE_DOTS_HOME from getenv, else userHome/.invisible-dots.
func homeFrom(getenv func(string) string, userHome string) (Layout, error) {
	if dir := getenv(EnvHome); dir != "" {
		return New(dir)
	}
	if userHome == "" {
		return Layout{}, errors.New("find the user's home directory: set " + EnvHome + " or HOME")
	}
	return New(filepath.Join(userHome, DefaultHomeDir))
}

// Chown changes the owner of path without following a symbolic link
// (os.Lchown). Tests inject one.
type Chown func(path string, uid, gid int) error

// GiveBackTree gives dir and everything under it to the person (only when
// p.GiveBack: a root process acting for another user). A dir that does not
// exist is nothing to give back.
func (p Person) GiveBackTree(chown Chown, dir string) error {
	if !p.GiveBack {
		return nil
	}
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := chown(path, p.UID, p.GID); err != nil {
			return fmt.Errorf("give %s back to %s: %w", path, p.Name, err)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// GiveBackFile gives one file or directory (not what is under it) to the
// person, when p.GiveBack. A path that does not exist is skipped.
func (p Person) GiveBackFile(chown Chown, path string) error {
	if !p.GiveBack {
		return nil
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := chown(path, p.UID, p.GID); err != nil {
		return fmt.Errorf("give %s back to %s: %w", path, p.Name, err)
	}
	return nil
}

// GiveBackImages gives the person what image build writes in their home:
// the home directory itself (image build may have made it) and images/ with
// its cache.
func (p Person) GiveBackImages(chown Chown) error {
	return errors.Join(p.GiveBackFile(chown, p.Home.Root), p.GiveBackTree(chown, p.Home.Images()))
}

// GiveBackHostConfig gives the person what setup writes in their home: the
// home directory and config/ themselves (setup may have made them) and
// config/host.yaml. The other files of config/ (the API token, the master
// key) are the server's, and left as they are.
func (p Person) GiveBackHostConfig(chown Chown) error {
	return errors.Join(p.GiveBackFile(chown, p.Home.Root), p.GiveBackFile(chown, p.Home.Config()), p.GiveBackFile(chown, p.Home.HostConfig()))
}
