package home

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// alice is the account database of a host with one person, alice.
func alice(name string) (*user.User, error) {
	if name != "alice" {
		return nil, user.UnknownUserError(name)
	}
	return &user.User{Username: "alice", Uid: "1001", Gid: "1002", HomeDir: "/home/alice"}, nil
}

func noLookup(t *testing.T) func(string) (*user.User, error) {
	return func(name string) (*user.User, error) {
		t.Errorf("lookup(%q): a normal user's home is their own, nothing to look up", name)
		return nil, errors.New("unexpected")
	}
}

func TestForPersonUnderSudoActsForSudoUser(t *testing.T) {
	// sudo resets HOME to root's and drops INVISIBLE_DOTS_HOME.
	env := map[string]string{"SUDO_USER": "alice", "HOME": "/root", "USER": "root"}
	p, err := ForPerson(envOf(env), 0, alice)
	if err != nil {
		t.Fatal(err)
	}
	if p.Home.Root != "/home/alice/.invisible-dots" {
		t.Errorf("home = %s; want alice's, /home/alice/.invisible-dots", p.Home.Root)
	}
	if !p.GiveBack || p.UID != 1001 || p.GID != 1002 || p.Name != "alice" || p.Root {
		t.Errorf("person = %+v; want alice (1001:1002), files given back", p)
	}

	// INVISIBLE_DOTS_HOME that reached the process (sudo -E, or passed on
	// by the caller) is the person's home.
	env[EnvHome] = "/srv/dots"
	if p, err = ForPerson(envOf(env), 0, alice); err != nil || p.Home.Root != "/srv/dots" || !p.GiveBack {
		t.Errorf("with %s: person = %+v, %v; want /srv/dots given back to alice", EnvHome, p, err)
	}
}

func TestForPersonRootWithoutSudoUserSaysSo(t *testing.T) {
	for name, sudoUser := range map[string]string{"no SUDO_USER": "", "SUDO_USER=root": "root"} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"SUDO_USER": sudoUser, "HOME": "/root", "USER": "root"}
			p, err := ForPerson(envOf(env), 0, noLookup(t))
			if err != nil {
				t.Fatal(err)
			}
			if p.Home.Root != "/root/.invisible-dots" || !p.Root || p.GiveBack {
				t.Errorf("person = %+v; want root, in /root/.invisible-dots, nothing given back", p)
			}
			if !strings.Contains(p.Note, "acting for root") || strings.Contains(p.Note, "\n") {
				t.Errorf("note = %q; want one line saying it acts for root", p.Note)
			}
		})
	}
}

func TestForPersonNormalUserIsThemselves(t *testing.T) {
	env := map[string]string{"HOME": "/home/bob", "USER": "bob", "SUDO_USER": "alice"}
	p, err := ForPerson(envOf(env), 1000, noLookup(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.Home.Root != "/home/bob/.invisible-dots" || p.GiveBack || p.Root || p.Note != "" || p.Name != "bob" {
		t.Errorf("person = %+v; want bob in his own home, nothing to say or give back", p)
	}
}

func TestForPersonUnknownSudoUser(t *testing.T) {
	_, err := ForPerson(envOf(map[string]string{"SUDO_USER": "mallory", "HOME": "/root"}), 0, alice)
	if err == nil || !strings.Contains(err.Error(), "mallory") {
		t.Errorf("ForPerson(SUDO_USER=mallory) = %v; want an error naming mallory", err)
	}
}

// writeHome makes what image build and setup leave in a home, plus files of
// the server's that are not theirs to give back.
func writeHome(t *testing.T, h Layout) (given, kept []string) {
	t.Helper()
	given = []string{
		h.Root, h.Images(), h.ImagesCache(), filepath.Join(h.ImagesCache(), "golden"),
		filepath.Join(h.ImagesCache(), "golden", "debs"), filepath.Join(h.ImagesCache(), "golden", "debs", "bash.deb"),
		h.ImageFile(Golden, "v1"), h.ImageManifest(Golden, "v1"), h.GoldenBuildLock(),
		h.Config(), h.HostConfig(),
	}
	kept = []string{h.APIToken(), h.DB(), filepath.Join(h.DB(), "PG_VERSION")}
	for _, d := range []string{filepath.Join(h.ImagesCache(), "golden", "debs"), h.Config(), h.DB()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(h.ImagesCache(), "golden", "debs", "bash.deb"), h.ImageFile(Golden, "v1"),
		h.ImageManifest(Golden, "v1"), h.GoldenBuildLock(), h.HostConfig(), h.APIToken(), filepath.Join(h.DB(), "PG_VERSION")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return given, kept
}

func TestGiveBackUnderSudoChownsWhatWasWritten(t *testing.T) {
	root := filepath.Join(t.TempDir(), "home")
	env := map[string]string{"SUDO_USER": "alice", "HOME": "/root", EnvHome: root}
	p, err := ForPerson(envOf(env), 0, alice)
	if err != nil {
		t.Fatal(err)
	}
	given, kept := writeHome(t, p.Home)
	var got []string
	chown := func(path string, uid, gid int) error {
		if uid != 1001 || gid != 1002 {
			t.Errorf("chown(%s, %d, %d); want alice's 1001:1002", path, uid, gid)
		}
		got = append(got, path)
		return nil
	}
	if err := errors.Join(p.GiveBackImages(chown), p.GiveBackHostConfig(chown)); err != nil {
		t.Fatal(err)
	}
	for _, f := range given {
		if !slices.Contains(got, f) {
			t.Errorf("%s was not given back to alice", f)
		}
	}
	for _, f := range kept {
		if slices.Contains(got, f) {
			t.Errorf("%s was chowned; it is not what setup or image build wrote", f)
		}
	}

	// Not root, or root for root: nothing changes owner.
	for _, q := range []Person{{Home: p.Home}, {Home: p.Home, Root: true}} {
		got = nil
		if err := errors.Join(q.GiveBackImages(chown), q.GiveBackHostConfig(chown)); err != nil || got != nil {
			t.Errorf("%+v: chowned %v, %v; want nothing", q, got, err)
		}
	}
}

// As root, the files really change owner (a temp home, an unused uid).
func TestGiveBackUnderSudoForReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	lookup := func(string) (*user.User, error) {
		return &user.User{Username: "alice", Uid: "54321", Gid: "54322", HomeDir: "/nonexistent"}, nil
	}
	root := filepath.Join(t.TempDir(), "home")
	p, err := ForPerson(envOf(map[string]string{"SUDO_USER": "alice", EnvHome: root}), 0, lookup)
	if err != nil {
		t.Fatal(err)
	}
	given, kept := writeHome(t, p.Home)
	if err := errors.Join(p.GiveBackImages(os.Lchown), p.GiveBackHostConfig(os.Lchown)); err != nil {
		t.Fatal(err)
	}
	owner := func(f string) (uint32, uint32) {
		var st syscall.Stat_t
		if err := syscall.Lstat(f, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid
	}
	for _, f := range given {
		if uid, gid := owner(f); uid != 54321 || gid != 54322 {
			t.Errorf("%s is %d:%d; want 54321:54322", f, uid, gid)
		}
	}
	for _, f := range kept {
		if uid, _ := owner(f); uid != 0 {
			t.Errorf("%s is owned by %d; want left to root", f, uid)
		}
	}
}
