package pidlock

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/home/smallfs"
)

// TestAcquireOnAFullDisk: on a full tmpfs a lock is neither created nor taken
// over half-written: Acquire fails with the disk full (it used to link an
// empty record into place, a lock no later start could read), a stale lock
// stays as it was (whole), and neither a temporary record nor a takeover
// marker is left; once the space returns the lock is taken.
func TestAcquireOnAFullDisk(t *testing.T) {
	root, ok := smallfs.Mount(t, "1m")
	if !ok {
		return
	}
	for name, tc := range map[string]struct {
		reason string
		stale  bool
	}{
		"new":   {reason: "no lock yet: the record cannot be written"},
		"stale": {reason: "a stale lock of a process gone: it cannot be taken over", stale: true},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, home.ServerLockFile)
			if tc.stale {
				writeLock(t, path, `{"pid":2000,"host_uptime_s":100,"boot_id":"`+boot+`"}`)
			}
			filler := smallfs.Fill(t, root)
			t.Cleanup(func() { _ = os.Remove(filler) })
			_, err := Acquire(path, fakeHost())
			if !home.DiskFull(err) {
				t.Fatalf("%s\nAcquire() on a full disk = %v; want the disk full", tc.reason, err)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if !tc.stale || e.Name() != home.ServerLockFile {
					t.Errorf("%s\n%s left in the lock's directory", tc.reason, e.Name())
				}
			}
			if tc.stale {
				if r := readRecord(t, path); r.PID != other {
					t.Errorf("%s\nthe stale lock is %+v after the failed takeover; want it as it was", tc.reason, r)
				}
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			l, err := Acquire(path, fakeHost())
			if err != nil {
				t.Fatalf("%s\nAcquire() once the space returned: %v", tc.reason, err)
			}
			if r := readRecord(t, path); r.PID != me {
				t.Errorf("%s\nthe lock holds %+v; want pid %d", tc.reason, r, me)
			}
			if err := l.Release(); err != nil {
				t.Error(err)
			}
		})
	}
}
