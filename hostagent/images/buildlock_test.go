package images

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/pidlock"
)

// TestLockRuntimeBuildWaitsForAnotherBuilder: a runtime build lock held by
// another live builder (a process standing in for it) is waited for and the
// wait said; once that builder is gone the lock is taken.
func TestLockRuntimeBuildWaitsForAnotherBuilder(t *testing.T) {
	h, err := home.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	if err := os.MkdirAll(h.Images(), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := pidlock.Acquire(h.RuntimeBuildLock(), pidlock.Options{PID: other.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var said []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, format)
	}
	got := make(chan error, 1)
	go func() {
		l, err := LockRuntimeBuild(context.Background(), h, logf)
		if err == nil {
			err = l.Release()
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("LockRuntimeBuild returned %v while another builder held the lock", err)
	default:
	}
	_ = other.Process.Kill()
	_ = other.Wait()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock of a builder that is gone was not taken")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(said) != 1 || !strings.Contains(said[0], "waiting for another runtime ISO build") {
		t.Errorf("said %q; want the wait said once", said)
	}
}
