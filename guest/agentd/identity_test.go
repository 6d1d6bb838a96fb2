package agentd

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// asNobody is a rig whose work runs as nobody, a user every Debian system
// has: the real uid switch and file-system user switch, without creating a
// user on the test machine. It needs root (or the three capabilities).
func asNobody(t *testing.T) (*rig, *Identity) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("switching to another user needs root here (the test machine runs tests as root in CI)")
	}
	id, err := LookupIdentity("nobody")
	if err != nil {
		t.Skipf("no nobody user to switch to: %v", err)
	}
	r := newRig(t, func(c *Config) { c.RunAs = id })
	// The rig's directory is root's 0700 temporary directory; nobody must
	// reach home.
	for d := r.home; d != "/"; d = filepath.Dir(d) {
		if d == r.home {
			os.Chown(d, int(id.UID), int(id.GID))
			continue
		}
		fi, err := os.Stat(d)
		if err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
	return r, id
}

func TestWorkRunsAsTheDotUser(t *testing.T) {
	r, id := asNobody(t)
	a := r.tcpDo("POST", protocol.PathExec, jsonBody(protocol.ExecRequest{Command: "id -u; id -g; grep -E '^Cap(Prm|Eff|Amb)' /proc/self/status"}))
	var got protocol.ExecResponse
	a.decode(t, &got)
	want := "65534\n"
	lines := strings.Split(strings.TrimSpace(got.Stdout), "\n")
	if a.status != 200 || len(lines) != 5 || lines[0]+"\n" != want {
		t.Fatalf("exec as %s = %d %+v", id.Name, a.status, got)
	}
	for _, l := range lines[2:] {
		if !strings.HasSuffix(l, "0000000000000000") {
			t.Errorf("a command of the Dot's user holds a capability: %s", l)
		}
	}
	// A directory the user cannot enter is no working directory, and
	// checking it moves nobody's working directory, the daemon's included.
	wd, _ := os.Getwd()
	locked := filepath.Join(r.home, "locked")
	os.Mkdir(locked, 0o700)
	a = r.tcpDo("POST", protocol.PathExec, jsonBody(protocol.ExecRequest{Command: "true", Cwd: "locked"}))
	if a.status != 400 || a.code() != protocol.ErrInvalidRequest {
		t.Fatalf("exec in a directory the user cannot enter = %d %s, want 400", a.status, a.body)
	}
	if now, _ := os.Getwd(); now != wd {
		t.Fatalf("the daemon's working directory moved from %s to %s", wd, now)
	}
}

func TestFilesActAsTheDotUser(t *testing.T) {
	r, id := asNobody(t)
	for _, local := range []bool{false, true} {
		a := r.do("PUT", protocol.PathFiles+q("made/by-put"), strings.NewReader("x"), !local, local)
		if a.status != 204 {
			t.Fatalf("PUT as %s (local %v) = %d %s", id.Name, local, a.status, a.body)
		}
		for _, p := range []string{"made", "made/by-put"} {
			fi, err := os.Stat(filepath.Join(r.home, p))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != id.UID || st.Gid != id.GID {
				t.Fatalf("%s belongs to %d:%d, want the Dot's user %d:%d", p, st.Uid, st.Gid, id.UID, id.GID)
			}
		}
	}
	// A file the Dot's user may not open is refused on both listeners, even
	// though the daemon itself (root here) could read it.
	private := filepath.Join(r.home, "root-only")
	os.WriteFile(private, []byte("secret"), 0o600)
	outside := filepath.Join(r.dir, "root-only")
	os.WriteFile(outside, []byte("secret"), 0o600)
	for _, c := range []struct {
		local bool
		path  string
	}{{false, "root-only"}, {true, "root-only"}, {true, outside}} {
		a := r.do("GET", protocol.PathFiles+q(c.path), nil, !c.local, c.local)
		if a.status != 403 || a.code() != protocol.ErrPermissionDenied {
			t.Fatalf("GET %s (local %v) = %d %s, want 403 permission_denied", c.path, c.local, a.status, a.body)
		}
	}
	a := r.tcpDo("PUT", protocol.PathFiles+q("root-only"), strings.NewReader("overwrite"))
	if a.status != 403 || a.code() != protocol.ErrPermissionDenied {
		t.Fatalf("PUT over a root-only file = %d %s, want 403 permission_denied", a.status, a.body)
	}
	if b, _ := os.ReadFile(private); string(b) != "secret" {
		t.Fatalf("the root-only file now holds %q", b)
	}
}

func TestRelayRunsAsTheDotUser(t *testing.T) {
	r, _ := asNobody(t)
	var out strings.Builder
	code, err := Relay(t.Context(), RelayOptions{Socket: r.local, Argv: []string{"id", "-u"}, Stdout: &out, Stderr: &out})
	if err != nil || code != 0 || out.String() != "65534\n" {
		t.Fatalf("relay id -u = %d %v %q, want 65534", code, err, out.String())
	}
	out.Reset()
	code, err = Relay(t.Context(), RelayOptions{Socket: r.local, TTY: true, Argv: []string{"sh", "-c", "stat -c %u $(tty)"}, Stdout: &out, Stderr: &out})
	if err != nil || code != 0 || strings.TrimSpace(out.String()) != "65534" {
		t.Fatalf("the terminal of a relayed program belongs to %q (%d %v), want the Dot's user", out.String(), code, err)
	}
}

func TestLookupIdentity(t *testing.T) {
	if _, err := LookupIdentity("no-such-user-here"); err == nil || !strings.Contains(err.Error(), "--run-as") {
		t.Fatalf("LookupIdentity of a missing user = %v, want an error naming --run-as", err)
	}
	id, err := LookupIdentity("root")
	if err != nil || id.UID != 0 || id.GID != 0 || len(id.Groups) == 0 {
		t.Fatalf("LookupIdentity(root) = %+v, %v", id, err)
	}
}
