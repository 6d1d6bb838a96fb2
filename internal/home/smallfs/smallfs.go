// Package smallfs gives the tests of a full disk a real small filesystem: a
// tmpfs of a few MiB, mounted by the test itself when it runs as root, or
// inside a user and mount namespace of its own (`unshare -rm`) when it does
// not. Tests only: nothing in the product imports it.
package smallfs

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// childEnv marks the run of a test under unshare, where this process is root
// of its own namespaces and mounts the tmpfs itself.
const childEnv = "INVISIBLE_DOTS_SMALLFS_CHILD"

// Mount returns a directory on a fresh tmpfs of size (mount's syntax: "4m"),
// unmounted at the end of the test. As root it is mounted in this process.
// Otherwise the test runs again in a child process under `unshare -rm`, its
// result is this test's, and ok is false: the caller returns at once. A test
// that can do neither is skipped, saying why.
func Mount(t *testing.T, size string) (dir string, ok bool) {
	t.Helper()
	dir = t.TempDir()
	var mountErr error
	if os.Geteuid() == 0 {
		if mountErr = syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+size+",mode=0700"); mountErr == nil {
			t.Cleanup(func() {
				// Lazily: a process the test could not end may still hold a
				// file open on it.
				if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
					t.Errorf("unmount the test's tmpfs %s: %v", dir, err)
				}
			})
			return dir, true
		}
	}
	if os.Getenv(childEnv) != "" {
		t.Skipf("a tmpfs cannot be mounted even under unshare -rm (%v): the full-disk test needs root or user namespaces", mountErr)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("the full-disk test needs a small filesystem: not root (or mount refused: %v) and no unshare(1) to make a user and mount namespace", mountErr)
	}
	if out, err := exec.Command(unshare, "-rm", "true").CombinedOutput(); err != nil {
		t.Skipf("the full-disk test needs a small filesystem: not root (or mount refused: %v) and `unshare -rm` fails here (%v: %s); user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone)", mountErr, err, strings.TrimSpace(string(out)))
	}
	cmd := exec.Command(unshare, "-rm", "--", os.Args[0], "-test.run", runPattern(t.Name()), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("ran under unshare -rm (not root):\n%s", out)
	switch {
	case err != nil:
		t.Fatalf("the run under unshare -rm failed: %v", err)
	case strings.Contains(string(out), "--- SKIP: "+t.Name()):
		t.Skip("skipped under unshare -rm")
	}
	return "", false
}

// runPattern is -test.run's pattern for exactly this (sub)test.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Fill writes a file in dir until the filesystem refuses (ENOSPC) and
// returns its path: removing it gives the space back.
func Fill(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "filler-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("fill %s: %v", dir, err)
			}
			break
		}
	}
	// The last partial block: a page at a time until nothing fits.
	small := make([]byte, 512)
	for {
		if _, err := f.Write(small); err != nil {
			break
		}
	}
	return f.Name()
}
