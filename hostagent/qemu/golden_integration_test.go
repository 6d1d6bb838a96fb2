package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"os"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// These tests boot the golden image (`invisible-dots image build`, or
// `make golden-image`) under tcg. Building it takes root and a minute or two,
// so a test does not build it: it takes the newest golden image with the
// desktop registered in GOLDEN_IMAGE_HOME, else INVISIBLE_DOTS_HOME (or
// ~/.invisible-dots), and is skipped, saying so, when there is none.

// goldenDriver returns a tcg driver on a fresh home that shares the golden
// image and runtime ISO of the home that has them (symlinked: registered
// images are read-only inputs), and the spec of a Dot on them.
func goldenDriver(t testing.TB) (*Driver, driver.Spec) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM")
	}
	if _, err := FindBinaries(os.Getenv); err != nil {
		t.Skip("QEMU is not installed: " + err.Error())
	}
	src, err := goldenSourceHome()
	if err != nil {
		t.Fatal(err)
	}
	h := home.Layout{Root: t.TempDir()}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	gimg, rimg, err := images.ShareDesktop(src, h)
	if errors.Is(err, images.ErrNoDesktopImage) {
		t.Skipf("%v (or set GOLDEN_IMAGE_HOME to a home that has one)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	d, err := New(context.Background(), Options{Home: h, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	return d, driver.Spec{
		ID: home.VMID{Namespace: "default", Name: "golden"}, CPUs: 1, MemoryMiB: 1024,
		DiskBytes:   int64(protocol.Bounds.DiskGiB.Min) << 30,
		GoldenImage: gimg.Version, RuntimeImage: rimg.Version, Token: testToken,
	}
}

type screenshot struct {
	png     []byte
	colours int
}

// waitScreenshot asks GET /v1/screenshot until the guest answers a PNG
// that is not one colour: Xvfb answers at once with a blank screen, and the
// XFCE session draws on it some seconds later.
func waitScreenshot(ctx context.Context, d *Driver, target guestclient.Target, timeout time.Duration) (screenshot, error) {
	deadline := time.Now().Add(timeout)
	for {
		shot, err := takeScreenshot(ctx, d, target)
		if (err == nil && shot.colours > 1) || time.Now().After(deadline) {
			return shot, err
		}
		time.Sleep(time.Second)
	}
}

func takeScreenshot(ctx context.Context, d *Driver, target guestclient.Target) (screenshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resp, err := d.guest.Request(ctx, target, "GET", protocol.PathScreenshot, nil, nil)
	if err != nil {
		return screenshot{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return screenshot{}, err
	}
	if resp.StatusCode != 200 {
		return screenshot{}, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	img, err := png.Decode(bytes.NewReader(body))
	if err != nil {
		return screenshot{}, fmt.Errorf("not a PNG: %w", err)
	}
	seen := map[color.RGBA]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 7 {
		for x := r.Min.X; x < r.Max.X; x += 7 {
			seen[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)] = true
		}
	}
	return screenshot{png: body, colours: len(seen)}, nil
}

func goldenSourceHome() (home.Layout, error) {
	if dir := os.Getenv("GOLDEN_IMAGE_HOME"); dir != "" {
		return home.New(dir)
	}
	return home.FromEnv()
}

// goldenBootTimeout bounds a golden boot under tcg, which runs systemd and
// the desktop on an emulated processor.
const goldenBootTimeout = 10 * time.Minute

// TestGoldenImageBootsAnswersAndPowersItselfOff boots a Dot's VM on the
// golden image as the driver boots every Dot (the image's own kernel and
// initramfs, the root by label on the Dot's overlay), waits for dot-agentd's
// health through the proven channel, checks that the root file system grew
// to the Dot's disk, and stops it through the guest's own poweroff: dot-agentd
// runs sudo with the rule the seed reader installed, and QEMU exits by
// itself.
func TestGoldenImageBootsAnswersAndPowersItselfOff(t *testing.T) {
	ctx := context.Background()
	d, spec := goldenDriver(t)
	// Chromium needs more than the 1 GiB of the benchmark's boot; and under
	// tcg each vCPU is a host thread: the desktop draws in half the time on
	// two.
	spec.MemoryMiB = 2048
	spec.CPUs = 2
	vm := d.home.VM(spec.ID)
	cleanupVM(t, d, spec.ID)

	t0 := time.Now()
	if _, err := d.Start(ctx, spec); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if _, err := waitHealthy(ctx, d, spec, goldenBootTimeout); err != nil {
		t.Fatalf("the golden guest never answered GET /v1/health: %v", err)
	}
	t.Logf("golden image %s: Start() to health in %s under tcg", spec.GoldenImage, time.Since(t0).Round(100*time.Millisecond))

	target, err := d.GuestTarget(ctx, spec.ID, spec.Token)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := d.guest.System(ctx, target)
	if err != nil {
		t.Fatalf("GET /v1/system: %v", err)
	}
	// The overlay is DiskBytes; the image's file system is smaller and
	// x-systemd.growfs grows it at boot. Allow for ext4's own overhead.
	if min := uint64(spec.DiskBytes) * 9 / 10; sys.DiskTotalBytes < min {
		t.Errorf("the guest's root holds %d bytes, want at least %d (the Dot's disk is %d): the file system did not grow", sys.DiskTotalBytes, min, spec.DiskBytes)
	}
	if sys.Hostname != spec.ID.Name {
		t.Errorf("hostname = %q, want %q (from the seed's meta-data)", sys.Hostname, spec.ID.Name)
	}

	// The desktop (dot-desktop.service: Xvfb and XFCE) answers a
	// screenshot that is a PNG with more than one colour.
	t1 := time.Now()
	shot, err := waitScreenshot(ctx, d, target, 5*time.Minute)
	if err != nil {
		t.Fatalf("GET /v1/screenshot: %v\nserial: %s", err, tail(vm.SerialLog(), 4096))
	}
	t.Logf("desktop drawn: screenshot %d bytes, %d colours sampled, %s after health", len(shot.png), shot.colours, time.Since(t1).Round(100*time.Millisecond))
	if shot.colours < 2 {
		t.Errorf("the desktop screenshot is one colour: the session drew nothing")
	}

	// What the model runs runs as dot, which cannot become root and cannot
	// read dot-agentd's token (ref 4.1, 4.3).
	for _, c := range []struct{ cmd, want string }{
		{"id -un", "dot\n"},
		{"sudo -n true 2>/dev/null && echo root || echo refused", "refused\n"},
		{"su -c true root </dev/null 2>/dev/null && echo root || echo refused", "refused\n"},
		{"cat " + protocol.GuestConfigPath + " 2>/dev/null || echo refused", "refused\n"},
		{"cat /proc/sys/kernel/yama/ptrace_scope", "1\n"},
		// The seed's host name resolves (sudo looks it up).
		{"getent hosts \"$(hostname)\" | awk '{print $1}'", "127.0.1.1\n"},
		// The browser and its MCP server run as dot: Debian's Chromium
		// renders a page headless, and @playwright/mcp starts on Debian's
		// Node.
		{"/usr/lib/chromium/chromium --headless=new --disable-gpu --dump-dom 'data:text/html,<p>golden</p>' 2>/dev/null | grep -o '<p>golden</p>'", "<p>golden</p>\n"},
		{"/usr/local/bin/playwright-mcp --version >/dev/null && echo mcp", "mcp\n"},
	} {
		var out protocol.ExecResponse
		if err := d.guest.DoJSON(ctx, target, "POST", protocol.PathExec, protocol.ExecRequest{Command: c.cmd, TimeoutMs: 180000}, &out); err != nil {
			t.Fatalf("POST /v1/exec %q: %v", c.cmd, err)
		}
		if out.Stdout != c.want {
			t.Errorf("as dot, %q printed %q (stderr %q), want %q", c.cmd, out.Stdout, out.Stderr, c.want)
		}
	}

	res, err := stopVM(ctx, d, spec.ID, spec.Token, imageGrace)
	if err != nil {
		t.Fatalf("stopVM() = %v", err)
	}
	if !res.WasRunning || res.PoweroffErr != nil || !res.PoweredOff || res.Killed {
		t.Errorf("stopVM() = %+v; want the guest to power itself off (sudo's rule from the seed)\n%s", res, tail(vm.SerialLog(), 16384))
	}
	if res.PoweredOff {
		t.Logf("the guest powered itself off %s after it was asked (under tcg)", res.Took.Round(100*time.Millisecond))
	}
}

// BenchmarkStartStopGoldenImage boots the golden image under tcg (say so
// when quoting it) and reports, to set beside BenchmarkStartStopTestImage of
// the same run (make bench-golden):
//   - start-to-health-s: Start() until dot-agentd answers GET /v1/health;
//   - start-to-desktop-s: Start() until a screenshot shows the XFCE session;
//   - idle-rss-MiB: QEMU's resident memory 10 s after the desktop drew
//     (under tcg it holds TCG's translation cache too, so it overstates what
//     a KVM guest costs);
//   - guest-used-MiB: the guest's own MemTotal - MemAvailable then, what
//     the idle desktop takes of the Dot's memory;
//   - stop-s: the guest's own poweroff until QEMU exited.
//
// Run: go test -run '^$' -bench StartStopGoldenImage -benchtime 1x ./hostagent/qemu/
func BenchmarkStartStopGoldenImage(b *testing.B) {
	ctx := context.Background()
	d, spec := goldenDriver(b)
	cleanupVM(b, d, spec.ID)
	var health, desktop, stop time.Duration
	var rss, used float64
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		obs, err := d.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := waitHealthy(ctx, d, spec, goldenBootTimeout); err != nil {
			b.Fatal(err)
		}
		health += time.Since(t0)
		target, err := d.GuestTarget(ctx, spec.ID, spec.Token)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := waitScreenshot(ctx, d, target, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
		desktop += time.Since(t0)
		b.StopTimer()
		time.Sleep(10 * time.Second)
		rss += rssMiB(b, obs.PID)
		sys, err := d.guest.System(ctx, target)
		if err != nil {
			b.Fatal(err)
		}
		used += float64(sys.MemTotalBytes-sys.MemAvailableBytes) / (1 << 20)
		b.StartTimer()
		stop += benchStop(ctx, b, d, spec, i)
	}
	n := float64(b.N)
	b.ReportMetric(health.Seconds()/n, "start-to-health-s")
	b.ReportMetric(desktop.Seconds()/n, "start-to-desktop-s")
	b.ReportMetric(rss/n, "idle-rss-MiB")
	b.ReportMetric(used/n, "guest-used-MiB")
	b.ReportMetric(stop.Seconds()/n, "stop-s")
}
