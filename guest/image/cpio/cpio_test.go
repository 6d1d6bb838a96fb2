package cpio

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReadBackWithCpio writes an archive and unpacks it with GNU cpio, the
// reader every Debian has, as the kernel would: names, contents, modes,
// owners and links must come back as written.
func TestReadBackWithCpio(t *testing.T) {
	cpioBin, err := exec.LookPath("cpio")
	if err != nil {
		t.Skip("cpio is not installed (apt-get install cpio)")
	}
	a := New()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.File("etc/passwd", 0o644, 0, 0, []byte("root:x:0:0::/root:/bin/sh\n")))
	must(a.File("usr/local/bin/tool", 0o755, 0, 0, []byte("#!/bin/sh\n")))
	must(a.Dir("home/dot", 0o750, 1000, 1000))
	must(a.Dir("run/dir", fs.ModeSetgid|0o750, 998, 999))
	must(a.Dir("tmp", fs.ModeSticky|0o777, 0, 0))
	must(a.Symlink("bin/sh", "busybox"))
	must(a.File("odd", 0o600, 0, 0, []byte("abc"))) // a length that needs padding
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%512 != 0 {
		t.Fatalf("archive of %d bytes is not padded to 512", buf.Len())
	}
	dir := t.TempDir()
	cmd := exec.Command(cpioBin, "-id", "--quiet", "--no-absolute-filenames")
	cmd.Dir = dir
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -id: %v\n%s", err, out)
	}
	for _, c := range []struct {
		path    string
		mode    fs.FileMode
		content string
	}{
		{"etc/passwd", 0o644, "root:x:0:0::/root:/bin/sh\n"},
		{"usr/local/bin/tool", 0o755, "#!/bin/sh\n"},
		{"odd", 0o600, "abc"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, c.path))
		fi, _ := os.Stat(filepath.Join(dir, c.path))
		if err != nil || string(b) != c.content || fi.Mode().Perm() != c.mode {
			t.Errorf("%s: %q %v mode %v, want %q %v", c.path, b, err, fi.Mode(), c.content, c.mode)
		}
	}
	if l, err := os.Readlink(filepath.Join(dir, "bin/sh")); err != nil || l != "busybox" {
		t.Errorf("bin/sh links to %q (%v), want busybox", l, err)
	}
	for _, c := range []struct {
		path     string
		mode     fs.FileMode
		uid, gid uint32
	}{{"home/dot", fs.ModeDir | 0o750, 1000, 1000}, {"run/dir", fs.ModeDir | fs.ModeSetgid | 0o750, 998, 999}, {"tmp", fs.ModeDir | fs.ModeSticky | 0o777, 0, 0}} {
		fi, err := os.Stat(filepath.Join(dir, c.path))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode {
			t.Errorf("%s mode %v, want %v", c.path, fi.Mode(), c.mode)
		}
		if os.Geteuid() == 0 {
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != c.uid || st.Gid != c.gid {
				t.Errorf("%s owned by %d:%d, want %d:%d", c.path, st.Uid, st.Gid, c.uid, c.gid)
			}
		}
	}
	// Parents were made for nested entries.
	if fi, err := os.Stat(filepath.Join(dir, "usr/local")); err != nil || !fi.IsDir() {
		t.Errorf("usr/local was not made: %v", err)
	}
}

func TestSameEntriesSameBytes(t *testing.T) {
	build := func(order []string) []byte {
		a := New()
		for _, n := range order {
			a.File(n, 0o644, 0, 0, []byte(n))
		}
		var b bytes.Buffer
		a.WriteTo(&b)
		return b.Bytes()
	}
	if !bytes.Equal(build([]string{"a", "b/c", "d"}), build([]string{"d", "b/c", "a"})) {
		t.Fatal("the order entries were added in changed the archive")
	}
}
