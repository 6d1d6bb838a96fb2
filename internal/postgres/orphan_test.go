package postgres

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// TestStopOrphanFoundOnlyThroughTheSocketLock: a postmaster shutting down
// has already removed postmaster.pid but still holds its socket's lock file.
// The next start must wait for it instead of failing with "lock file already
// exists". A sleep running in the data directory stands in for the
// postmaster (it has the same cwd, which is what identifies ours).
func TestStopOrphanFoundOnlyThroughTheSocketLock(t *testing.T) {
	dir := t.TempDir()
	dataDir, runDir := filepath.Join(dir, "db"), filepath.Join(dir, "run")
	for _, d := range []string{dataDir, runDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	fakePostmaster := exec.Command("sleep", "60")
	fakePostmaster.Dir = dataDir
	if err := fakePostmaster.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- fakePostmaster.Wait() }()
	lock := strconv.Itoa(fakePostmaster.Process.Pid) + "\n" + dataDir + "\n"
	if err := os.WriteFile(filepath.Join(runDir, socketName+".lock"), []byte(lock), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stopOrphan(ctx, dataDir, runDir, logr.Discard()); err != nil {
		t.Fatalf("stopOrphan: %v", err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("stopOrphan returned but the process named by the socket lock still runs")
	}
}

// TestStopOrphanRemovesAZombiesLock: a postmaster that exited but was not
// reaped yet (a zombie, which PostgreSQL counts as alive) leaves a lock file
// naming it; the next start removes the stale file instead of failing with
// "lock file already exists".
func TestStopOrphanRemovesAZombiesLock(t *testing.T) {
	dir := t.TempDir()
	dataDir, runDir := filepath.Join(dir, "db"), filepath.Join(dir, "run")
	for _, d := range []string{dataDir, runDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	pid := zombie.Process.Pid
	// Not waited for yet: once it exits it is a zombie of this process.
	for deadline := time.Now().Add(5 * time.Second); !exited(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child did not exit")
		}
	}
	defer zombie.Wait()
	lock := filepath.Join(runDir, socketName+".lock")
	if err := os.WriteFile(lock, []byte(strconv.Itoa(pid)+"\n"+dataDir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := stopOrphan(context.Background(), dataDir, runDir, logr.Discard()); err != nil {
		t.Fatalf("stopOrphan: %v", err)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("the lock file naming a zombie is still there (%v)", err)
	}
}
