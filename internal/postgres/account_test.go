package postgres

import (
	"os"
	"path/filepath"
	"testing"
)

// A file removed between the walk's listing and its look at the file (a
// postmaster still shutting down removes postmaster.pid) is skipped, not an
// error that stops the server from starting.
func TestOwnSkipsAFileThatVanished(t *testing.T) {
	dir := t.TempDir()
	pid := filepath.Join(dir, "postmaster.pid")
	if err := os.WriteFile(pid, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("read %s: %v %v", dir, entries, err)
	}
	if err := os.Remove(pid); err != nil {
		t.Fatal(err)
	}
	a := account{name: "test", uid: uint32(os.Getuid()) + 1, gid: uint32(os.Getgid()) + 1, dropPrivileges: true}
	if err := a.own(pid, entries[0], nil); err != nil {
		t.Fatalf("a vanished file stopped the walk: %v", err)
	}
	// Any other failure still stops it.
	if err := a.own(dir, nil, os.ErrPermission); err == nil {
		t.Fatal("a permission error was skipped")
	}
}
