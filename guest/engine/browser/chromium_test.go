package browser

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startLike starts a process whose arguments look like a Chromium's: sh
// waiting on a sleep, so its own command line (what /proc shows) keeps the
// arguments after the script.
func startLike(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", "sleep 60; :", "chromium"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
	})
	return cmd
}

func TestWatchChromiumFindsTheBrowserOfTheProfileAndHearsItsEnd(t *testing.T) {
	profile := "/home/dot/browsers/watched-" + time.Now().Format("150405.000000") + "/profile"
	main := startLike(t, "--no-first-run", "--user-data-dir="+profile)
	startLike(t, "--type=renderer", "--user-data-dir="+profile)
	startLike(t, "--user-data-dir="+profile+"-other")
	ctx := context.Background()

	if _, err := watchChromium(ctx, "/proc", "/home/dot/browsers/nobody/profile", 200*time.Millisecond); err == nil {
		t.Errorf("a profile no browser runs with was found")
	}
	p, err := watchChromium(ctx, "/proc", profile, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if pid := p.(*pidWatch).pid; pid != main.Process.Pid {
		t.Fatalf("watching %d, want the browser process %d (not its renderer, not another profile's)", pid, main.Process.Pid)
	}
	if !p.Alive() {
		t.Fatal("a running browser is not alive")
	}
	select {
	case <-p.Done():
		t.Fatal("Done before the browser ended")
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	main.Process.Kill()
	select {
	case <-p.Done():
		t.Logf("its end heard after %s", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the browser's end was not heard in 5 s")
	}
	if p.Alive() {
		t.Error("a browser that ended is alive")
	}

	// Close stops a watch without a Done.
	again := startLike(t, "--user-data-dir="+profile+"-2")
	q, err := watchChromium(ctx, "/proc", profile+"-2", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	again.Process.Kill()
	select {
	case <-q.Done():
		t.Error("a closed watch said the browser ended")
	case <-time.After(100 * time.Millisecond):
	}
}
