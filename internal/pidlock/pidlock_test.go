package pidlock

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

const (
	me    = 1000
	other = 2000
	boot  = "11111111-1111-1111-1111-111111111111"
)

// fakeHost is a host at uptime 500 s of boot `boot` where only the listed
// pids run.
func fakeHost(running ...int) Options {
	return Options{
		PID:   me,
		Boot:  func() (home.Stamp, error) { return home.Stamp{BootID: boot, HostUptimeS: 500}, nil },
		Alive: func(pid int) bool { return contains(running, pid) },
	}
}

func contains(pids []int, pid int) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

func writeLock(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readRecord(t *testing.T, path string) Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return r
}

func TestAcquire(t *testing.T) {
	mine := Record{PID: me, Stamp: home.Stamp{BootID: boot, HostUptimeS: 500}}
	tests := map[string]struct {
		reason   string
		existing string // the lock file before; none when empty
		marker   bool   // a .takeover file exists before
		opts     Options
		// wantHeld: refused, and the message names these; else taken.
		wantHeld []string
	}{
		"free": {
			reason: "no lock file: created",
			opts:   fakeHost(),
		},
		"held by a live process": {
			reason:   "same boot, pid runs: refused by name",
			existing: `{"pid":2000,"host_uptime_s":100,"boot_id":"` + boot + `"}`,
			opts:     fakeHost(other),
			wantHeld: []string{"pid 2000", "server.lock"},
		},
		"holder gone": {
			reason:   "same boot, pid gone: stale",
			existing: `{"pid":2000,"host_uptime_s":100,"boot_id":"` + boot + `"}`,
			opts:     fakeHost(),
		},
		"host restarted (boot id)": {
			reason:   "a pid from another boot proves nothing, even if some process has it now",
			existing: `{"pid":2000,"host_uptime_s":100,"boot_id":"22222222-2222-2222-2222-222222222222"}`,
			opts:     fakeHost(other),
		},
		"host restarted (uptime, no boot id)": {
			reason:   "written at uptime 9000, now 500: before this boot",
			existing: `{"pid":2000,"host_uptime_s":9000}`,
			opts:     fakeHost(other),
		},
		"own pid": {
			reason:   "a record naming this process can only be an earlier holder's",
			existing: `{"pid":1000,"host_uptime_s":100,"boot_id":"` + boot + `"}`,
			opts:     fakeHost(me),
		},
		"holder gone, its child runs": {
			reason:   "the child still uses what the lock guards",
			existing: `{"pid":2000,"child_pid":2001,"host_uptime_s":100,"boot_id":"` + boot + `"}`,
			opts:     fakeHost(2001),
			wantHeld: []string{"child pid 2001", "server.lock"},
		},
		"holder and child gone": {
			reason:   "nothing runs on the lock's behalf",
			existing: `{"pid":2000,"child_pid":2001,"host_uptime_s":100,"boot_id":"` + boot + `"}`,
			opts:     fakeHost(),
		},
		"not a record": {
			reason:   "an unreadable lock is never taken: a person decides",
			existing: "garbage",
			opts:     fakeHost(),
			wantHeld: []string{"not a lock record", "remove "},
		},
		"takeover in progress": {
			reason:   "stale, but another process created .takeover first",
			existing: `{"pid":2000,"host_uptime_s":100,"boot_id":"` + boot + `"}`,
			marker:   true,
			opts:     fakeHost(),
			wantHeld: []string{"pid 2000", "server.lock.takeover"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), home.ServerLockFile)
			if tc.existing != "" {
				writeLock(t, path, tc.existing)
			}
			if tc.marker {
				writeLock(t, home.Takeover(path), `{"pid":3000}`)
			}
			lock, err := Acquire(path, tc.opts)
			if tc.wantHeld != nil {
				if !errors.Is(err, ErrHeld) {
					t.Fatalf("%s: got %v, want a refusal", tc.reason, err)
				}
				for _, want := range tc.wantHeld {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: refusal %q does not name %q", tc.reason, err, want)
					}
				}
				if b, _ := os.ReadFile(path); string(b) != tc.existing {
					t.Errorf("%s: a refusal changed the lock to %q", tc.reason, b)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if diff := cmp.Diff(mine, readRecord(t, path)); diff != "" {
				t.Errorf("%s: lock file (-want +got):\n%s", tc.reason, diff)
			}
			if _, err := os.Stat(home.Takeover(path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: .takeover left behind (%v)", tc.reason, err)
			}
			if err := lock.Release(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: lock file still there after Release", tc.reason)
			}
		})
	}
}

func TestReleaseOnlyByHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), home.ServerLockFile)
	lock, err := Acquire(path, fakeHost())
	if err != nil {
		t.Fatal(err)
	}
	// Judged gone, this process lost the lock to another.
	taken := `{"pid":2000,"host_uptime_s":600,"boot_id":"` + boot + `"}`
	writeLock(t, path, taken)
	if err := lock.Release(); err == nil {
		t.Error("Release of a lock taken over succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != taken {
		t.Errorf("Release removed or changed the new holder's lock: %q", b)
	}
}

func TestRealHost(t *testing.T) {
	path := filepath.Join(t.TempDir(), home.ServerLockFile)
	first, err := Acquire(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := readRecord(t, path)
	if got.PID != os.Getpid() || got.BootID == "" || got.HostUptimeS <= 0 {
		t.Errorf("record %+v lacks this pid, the boot id or the uptime", got)
	}
	// Another pid of this host that runs: pid 1.
	if _, err := Acquire(path, Options{PID: 1}); !errors.Is(err, ErrHeld) {
		t.Errorf("second holder: got %v, want a refusal", err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestOneWinnerAmongMany(t *testing.T) {
	for name, existing := range map[string]string{
		"free":  "",
		"stale": `{"pid":2000,"host_uptime_s":100,"boot_id":"` + boot + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), home.ServerLockFile)
			if existing != "" {
				writeLock(t, path, existing)
			}
			const n = 8
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					opts := fakeHost()
					opts.PID = 5000 + i
					// Every contender runs; the stale holder does not.
					opts.Alive = func(pid int) bool { return pid >= 5000 }
					_, errs[i] = Acquire(path, opts)
				}()
			}
			wg.Wait()
			winners := 0
			for _, err := range errs {
				switch {
				case err == nil:
					winners++
				case !errors.Is(err, ErrHeld) && !strings.Contains(err.Error(), "kept changing"):
					t.Errorf("unexpected error: %v", err)
				}
			}
			if winners != 1 {
				t.Errorf("%d processes hold the lock, want 1 (errors: %v)", winners, errs)
			}
		})
	}
}

func TestSetChild(t *testing.T) {
	path := filepath.Join(t.TempDir(), home.GoldenBuildLock)
	lock, err := Acquire(path, fakeHost())
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.SetChild(4242); err != nil {
		t.Fatal(err)
	}
	want := Record{PID: me, ChildPID: 4242, Stamp: home.Stamp{BootID: boot, HostUptimeS: 500}}
	if diff := cmp.Diff(want, readRecord(t, path)); diff != "" {
		t.Errorf("lock file after SetChild (-want +got):\n%s", diff)
	}
	// The holder is killed outright; its child still runs.
	opts := fakeHost(4242)
	opts.PID = 3000
	if _, err := Acquire(path, opts); !errors.Is(err, ErrHeld) {
		t.Errorf("lock with a running child: got %v, want a refusal", err)
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file still there after Release")
	}
}

// TestAcquireWait: a lock a live process holds is waited for, the wait told
// once, and taken when its holder releases it; a context that ends first
// ends the wait; an unreadable lock is refused at once, not waited on.
func TestAcquireWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), home.RuntimeBuildLock)
	holder, err := Acquire(path, Options{PID: other, Boot: fakeHost().Boot, Alive: func(int) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	host := fakeHost(other)
	var told []*HeldError
	done := make(chan error, 1)
	go func() {
		l, err := AcquireWait(context.Background(), path, host, 10*time.Millisecond, func(e *HeldError) { told = append(told, e) })
		if err == nil && l.Record().PID != me {
			err = errors.New("the lock taken records another pid")
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("AcquireWait returned %v while the holder held the lock", err)
	default:
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("AcquireWait after the release: %v", err)
	}
	if len(told) != 1 || told[0].Holder == nil || told[0].Holder.PID != other {
		t.Errorf("the wait was told %+v; want once, naming pid %d", told, other)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := AcquireWait(ctx, path, Options{PID: 3000, Boot: host.Boot, Alive: func(int) bool { return true }}, 10*time.Millisecond, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireWait of a held lock whose context ends = %v; want the context's error", err)
	}

	bad := filepath.Join(t.TempDir(), "bad.lock")
	writeLock(t, bad, "not a record")
	if _, err := AcquireWait(context.Background(), bad, host, 10*time.Millisecond, func(*HeldError) { t.Error("an unreadable lock was waited on") }); !errors.Is(err, ErrHeld) {
		t.Errorf("AcquireWait of an unreadable lock = %v; want ErrHeld at once", err)
	}
}
