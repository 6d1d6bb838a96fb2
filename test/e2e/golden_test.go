package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// goldenReadyTimeout bounds apply-to-READY of a golden-image Dot under tcg:
// systemd, the desktop and the engine on an emulated processor.
const goldenReadyTimeout = 10 * time.Minute

// goldenHome returns a fresh home holding the golden image with the desktop
// and the runtime ISO of the home that has them (GOLDEN_IMAGE_HOME, else
// INVISIBLE_DOTS_HOME or ~/.invisible-dots; `make golden-image` registers
// them there), symlinked: registered images are read-only. Without one the
// test is skipped, saying how to build it.
func goldenHome(t *testing.T) home.Layout {
	t.Helper()
	var src home.Layout
	var err error
	if dir := os.Getenv("GOLDEN_IMAGE_HOME"); dir != "" {
		src, err = home.New(dir)
	} else {
		src, err = home.FromEnv()
	}
	if err != nil {
		t.Fatal(err)
	}
	gimg, ok := images.LatestDesktop(src)
	if !ok {
		t.Skipf("no golden image with the desktop in %s: build one with make golden-image (as root), or set GOLDEN_IMAGE_HOME", src.Images())
	}
	rimg, err := images.Latest(src, home.Runtime)
	if err != nil {
		t.Skipf("no runtime ISO in %s: %v", src.Images(), err)
	}
	h, err := home.New(newHome(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	m, err := gimg.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	files := []string{gimg.File, gimg.ManifestPath, rimg.File, rimg.ManifestPath}
	if b := m.Boot; b != nil {
		files = append(files, filepath.Join(src.Images(), b.Kernel), filepath.Join(src.Images(), b.Initrd))
	}
	for _, f := range files {
		if err := os.Symlink(f, filepath.Join(h.Images(), filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// TestGoldenDotReady applies a Dot on a host whose only golden image is the
// full one (`invisible-dots image build`): its Computer boots it under tcg
// (the image's own kernel and initramfs, systemd, the seed read by
// dots-seed, dot-agentd and the engine started from the runtime ISO's units)
// and the Dot reaches READY with the key pushed. It reports apply-to-READY.
func TestGoldenDotReady(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM under QEMU")
	}
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		t.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	h := goldenHome(t)
	stand := startStandIn(t, nil)
	if err := hostconfig.Save(h, hostconfig.Config{Accelerator: hostconfig.TCG,
		OpenRouterURL: fmt.Sprintf("http://10.0.2.2:%d/api/v1", stand.port)}); err != nil {
		t.Fatal(err)
	}
	name := "e2e-golden"
	vm := h.VM(home.VMID{Namespace: "default", Name: name})
	t.Cleanup(func() { cvmKillRecorded(vm) })
	srv := startServer(t, h.Root)
	k := cvmKubectl{t: t, s: srv}
	homeEnv := []string{"INVISIBLE_DOTS_HOME=" + h.Root}

	t.Log("doctor's golden image row passes with the full golden image")
	if row := doctorRow(t, homeEnv, "golden image"); row.Status != "ok" {
		t.Errorf("doctor's golden image row = %+v; want ok", row)
	}
	const key = "sk-or-v1-e2e-golden-0123456789abcdef"
	if out, err := secretOpenRouter(homeEnv, key+"\n"); err != nil {
		t.Fatalf("secret openrouter: %v\n%s", err, out)
	}

	t.Log("a Dot on the golden image reaches READY")
	start := time.Now()
	k.apply(smallDot(name, ""))
	d := k.waitDot(name, goldenReadyTimeout, readyDot)
	t.Logf("FIGURE golden apply-to-READY %s (tcg, 1 vCPU)", time.Since(start).Round(time.Millisecond))
	if d.Status.ComputerState != dotsv1.ComputerRunning {
		t.Errorf("computer state %s; want RUNNING", d.Status.ComputerState)
	}

	t.Log("the guest is the golden image: systemd is PID 1, the desktop runs as dot")
	target, gc := guestOf(t, k, name)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []struct{ cmd, want string }{
		{"cat /proc/1/comm", "systemd\n"},
		{"pgrep -u dot -x Xvfb >/dev/null && echo desktop", "desktop\n"},
		// Ref 4's smoke: the model's user (exec runs as dot) reads none of
		// the engine's memory, the token or the engine's state (each refused
		// with EACCES, not failing for another reason), and cannot become
		// root.
		{deniedAsDot("head -c1 /proc/$(pgrep -o -u dotengine -x dot-engine)/mem"), "refused\n"},
		{deniedAsDot("cat /proc/$(pgrep -o -u dotengine -x dot-engine)/environ"), "refused\n"},
		{deniedAsDot("cat " + protocol.GuestConfigPath), "refused\n"},
		{deniedAsDot("ls /home/dotengine/state"), "refused\n"},
		{refusedAsDot("sudo -n true"), "refused\n"},
		{refusedAsDot("su -c true root </dev/null"), "refused\n"},
		// The engine runs, so the pgrep above found a process to refuse.
		{"pgrep -u dotengine -x dot-engine >/dev/null && echo engine", "engine\n"},
	} {
		var ex protocol.ExecResponse
		if err := gc.DoJSON(ctx, target, http.MethodPost, protocol.PathExec, protocol.ExecRequest{Command: c.cmd, TimeoutMs: 30000}, &ex); err != nil {
			t.Fatalf("exec %q in the guest: %v", c.cmd, err)
		}
		if ex.Stdout != c.want {
			t.Errorf("exec %q printed %q (stderr %q); want %q", c.cmd, ex.Stdout, ex.Stderr, c.want)
		}
	}
}

// refusedAsDot wraps a command the guest's dot user must not be able to run
// successfully: it prints "refused" when the command fails, and what it read
// otherwise (which the test then shows).
func refusedAsDot(cmd string) string {
	return "if out=$(" + cmd + " 2>/dev/null); then printf 'READ %s' \"$out\" | head -c 200; else echo refused; fi"
}

// deniedAsDot prints "refused" only when the command fails with the kernel's
// "Permission denied", so a path that merely does not exist (or a read of an
// unmapped address of /proc/PID/mem) cannot pass for a refusal.
func deniedAsDot(cmd string) string {
	return "if err=$(" + cmd + " 2>&1 >/dev/null); then echo READ; elif printf %s \"$err\" | grep -q 'Permission denied'; then echo refused; else printf 'OTHER %s' \"$err\" | head -c 200; fi"
}
