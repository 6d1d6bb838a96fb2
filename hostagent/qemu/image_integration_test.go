package qemu

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// These tests boot the test image (a Debian cloud kernel and a busybox
// initramfs running dot-agentd) under tcg. The image is built and registered
// in a temporary home by go run ./hostagent/images/cmd/test-image --home DIR,
// whose cache under _output/ makes every build after the first quick.

var (
	imageOnce sync.Once
	imageHome string
	imageErr  error
	imageSkip string
)

// testImageHome returns a home with the test image registered, building it
// once per test binary.
func testImageHome(t testing.TB) home.Layout {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM")
	}
	imageOnce.Do(func() {
		repo, err := repoRoot()
		if err != nil {
			imageSkip = err.Error()
			return
		}
		if _, err := os.Stat(filepath.Join(repo, "hostagent/images/cmd/test-image/main.go")); err != nil {
			imageSkip = "the test image builder (hostagent/images/cmd/test-image) is not in this checkout"
			return
		}
		if _, err := FindBinaries(os.Getenv); err != nil {
			imageSkip = "QEMU is not installed: " + err.Error()
			return
		}
		dir, err := os.MkdirTemp("", "hostagent-image-home-")
		if err != nil {
			imageErr = err
			return
		}
		imageHome = dir
		cmd := exec.Command("go", "run", "./hostagent/images/cmd/test-image", "--home", dir)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			imageErr = errors.New("building the test image failed: " + err.Error() + "\n" + string(out))
		}
	})
	if imageSkip != "" {
		t.Skip(imageSkip)
	}
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return home.Layout{Root: imageHome}
}

func repoRoot() (string, error) {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// imageDriver returns a tcg driver on a fresh home that shares the built
// images (symlinked: the images are read-only inputs).
func imageDriver(t testing.TB) (*Driver, driver.Spec) {
	t.Helper()
	src := testImageHome(t)
	h := home.Layout{Root: t.TempDir()}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src.Images())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(src.Images(), e.Name()), filepath.Join(h.Images(), e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := images.Latest(h, home.Golden)
	if err != nil {
		t.Fatal(err)
	}
	runtime, err := images.Latest(h, home.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	d, err := New(context.Background(), Options{Home: h, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	return d, driver.Spec{
		ID: home.VMID{Namespace: "default", Name: "vm"}, CPUs: 1, MemoryMiB: 512,
		GoldenImage: golden.Version, RuntimeImage: runtime.Version, Token: testToken,
	}
}

// imageGrace is how long the test image's guest has to power itself off
// once it accepted the poweroff (the reconciler's default grace).
const imageGrace = 60 * time.Second

// waitHealthy asks GET /v1/health through the proven channel until the
// guest answers, or the VM exits, or the timeout passes.
func waitHealthy(ctx context.Context, d *Driver, spec driver.Spec, timeout time.Duration) (protocol.HealthResponse, error) {
	deadline := time.Now().Add(timeout)
	for {
		// Each ask is bounded as the Computer reconciler bounds it while
		// the guest boots: QEMU's forward holds a connection open until
		// the guest listens, and a new one is answered sooner.
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := d.Health(hctx, spec.ID, spec.Token)
		cancel()
		if err == nil {
			return h, nil
		}
		if errors.Is(err, driver.ErrNotRunning) || time.Now().After(deadline) {
			vm := d.home.VM(spec.ID)
			return h, errors.New(err.Error() + "\nqemu log: " + tail(vm.QEMULog(), 2048) + "\nserial: " + tail(vm.SerialLog(), 4096))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestTestImageBootsAnswersAndPowersItselfOff(t *testing.T) {
	ctx := context.Background()
	d, spec := imageDriver(t)
	vm := d.home.VM(spec.ID)
	cleanupVM(t, d, spec.ID)

	obs, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if obs.State != driver.Running {
		t.Fatalf("Start() = %+v, want Running", obs)
	}
	// Start returned before the guest booted: no kernel is up the moment
	// QEMU is spawned, so a health call made right after fails.
	if h, err := d.Health(ctx, spec.ID, spec.Token); err == nil {
		t.Fatalf("Health() right after Start() = %+v; want the guest not up yet (Start does not wait for it)", h)
	}
	h, err := waitHealthy(ctx, d, spec, 90*time.Second)
	if err != nil {
		t.Fatalf("the guest never answered GET /v1/health: %v", err)
	}
	if h.Agentd != protocol.AgentdOK {
		t.Errorf("health = %+v, want agentd ok", h)
	}
	// The token reached only a listener that proved it: a wrong token is
	// refused at the proof, before it is sent.
	if _, err := d.Health(ctx, spec.ID, strings.Repeat("f", 32)); err == nil {
		t.Error("Health() with another Dot's token succeeded; want guest_unproven")
	}

	res, err := stopVM(ctx, d, spec.ID, spec.Token, imageGrace)
	if err != nil {
		t.Fatalf("stopVM() = %v", err)
	}
	if !res.WasRunning || res.PoweroffErr != nil || !res.PoweredOff || res.Killed || res.ExitStatus != "exit status 0" {
		t.Errorf("stopVM() = %+v; want the guest to power itself off (QEMU exits by itself with status 0, not killed)\n%s", res, tail(vm.SerialLog(), 2048))
	}
	if o, _ := d.Observe(ctx, spec.ID); o.State != driver.Stopped || o.Exited || o.PID != 0 {
		t.Errorf("after the stop, Observe() = %+v; want Stopped, record cleared", o)
	}

	// Start again on the same disk: a new QEMU, the guest answers again.
	obs2, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("second Start() = %v", err)
	}
	if obs2.State != driver.Running || obs2.PID == obs.PID {
		t.Errorf("second Start() = %+v; want a new QEMU", obs2)
	}
	if _, err := waitHealthy(ctx, d, spec, 90*time.Second); err != nil {
		t.Fatalf("after a restart the guest never answered: %v", err)
	}
	if err := destroyVM(ctx, d, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vm.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Destroy(), %s: %v; want removed", vm.Dir, err)
	}
}

// TestMain removes the shared image home after every test and benchmark.
func TestMain(m *testing.M) {
	code := m.Run()
	if imageHome != "" {
		os.RemoveAll(imageHome)
	}
	os.Exit(code)
}
