package computer

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/home/smallfs"
)

// TestComputerStartOnAFullDisk: the real QEMU driver with the home on a
// small tmpfs, filled. The Computer's start fails with Ready DiskFull naming
// the write and the fix, is not counted as a crash (the Dot's tasks are not
// given up for the host's disk), leaves no record behind, is tried again
// after diskFullRetry, and once the space returns the next reconcile starts
// QEMU (STARTING: the blank golden disk has no guest to answer).
func TestComputerStartOnAFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("runs QEMU")
	}
	bin, err := qemu.FindBinaries(os.Getenv)
	if err != nil {
		t.Skipf("QEMU is not installed (%v); CI installs qemu-system-x86 and qemu-utils", err)
	}
	root, ok := smallfs.Mount(t, "4m")
	if !ok {
		return
	}
	h := home.Layout{Root: filepath.Join(root, "home")}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	registerBlankImages(t, bin, h)
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	ctx := context.Background()
	d, err := qemu.New(ctx, qemu.Options{Home: h, Config: &cfg, Binaries: bin})
	if err != nil {
		t.Fatal(err)
	}
	comp := testComputer("full", dotsv1.RunAlways)
	comp.Spec.CPU, comp.Spec.Memory = 1, resource.MustParse("128Mi")
	r, c := newTestReconciler(d, comp)
	clk := r.Clock.(*clocktesting.FakePassiveClock)
	rec := r.Recorder.(*events.FakeRecorder)
	vm := h.VM(VMID(comp))
	t.Cleanup(func() {
		if err := d.Destroy(context.Background(), VMID(comp)); err != nil {
			t.Errorf("destroy the VM at the end of the test: %v", err)
		}
	})

	filler := smallfs.Fill(t, root)
	for try := 1; try <= 2; try++ {
		reconcileOnce(t, r, comp.Name)
		got := getComputer(c, comp.Name)
		ready := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition)
		if ready == nil || ready.Reason != dotsv1.DiskFullReason {
			t.Fatalf("try %d: Ready = %+v; want reason %s", try, ready, dotsv1.DiskFullReason)
		}
		for _, want := range []string{"disk is full", vm.Dir, "df -h " + h.Root} {
			if !strings.Contains(ready.Message, want) {
				t.Errorf("try %d: Ready's message %q does not say %q", try, ready.Message, want)
			}
		}
		if p := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ProvisionedCondition); p == nil || p.Reason != dotsv1.DiskFullReason {
			t.Errorf("try %d: Provisioned = %+v; want reason %s", try, p, dotsv1.DiskFullReason)
		}
		f := got.Status.StartFailure
		if f == nil || f.ConsecutiveFailCount != 0 || f.RetryAfter == nil || !f.RetryAfter.Time.Equal(clk.Now().Add(diskFullRetry)) {
			t.Errorf("try %d: startFailure = %+v; want no failure counted and a retry %s later", try, f, diskFullRetry)
		}
		if got.Status.State == dotsv1.ComputerError || got.Status.PID != 0 {
			t.Errorf("try %d: state %s, pid %d; want a VM not running and not ERROR", try, got.Status.State, got.Status.PID)
		}
		for _, p := range []string{vm.Disk(), vm.QEMUJSON(), vm.StartPending()} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("try %d: %s after the failed start: %v; want it absent", try, p, err)
			}
		}
		t.Logf("try %d: Ready %s: %s", try, ready.Reason, ready.Message)
		if try == 1 {
			// Held until the retry time: no start, the reason kept.
			clk.SetTime(clk.Now().Add(diskFullRetry / 2))
			res := reconcileOnce(t, r, comp.Name)
			if got := getComputer(c, comp.Name); meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition).Reason != dotsv1.DiskFullReason || res.RequeueAfter <= 0 || res.RequeueAfter > diskFullRetry {
				t.Errorf("a reconcile before the retry time: Ready %+v, requeue %v; want DiskFull kept and a requeue at the retry time", meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition), res)
			}
			clk.SetTime(clk.Now().Add(diskFullRetry))
		}
	}
	if !eventSeen(rec, dotsv1.DiskFullReason) {
		t.Errorf("no %s Event was recorded", dotsv1.DiskFullReason)
	}

	// The space returns: the next reconcile after the retry time starts it.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(diskFullRetry))
	reconcileOnce(t, r, comp.Name)
	got := getComputer(c, comp.Name)
	if got.Status.State != dotsv1.ComputerStarting || got.Status.PID == 0 {
		t.Fatalf("after the space returned: state %s, pid %d, Ready %+v; want STARTING with QEMU running", got.Status.State, got.Status.PID, meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition))
	}
	b, err := os.ReadFile(vm.QEMUJSON())
	if err != nil || !json.Valid(b) {
		t.Errorf("qemu.json after the start: %v, %q", err, b)
	}
}

// eventSeen says whether the recorder holds an Event of reason.
func eventSeen(rec *events.FakeRecorder, reason string) bool {
	for {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, " "+reason+" ") {
				return true
			}
		case <-time.After(10 * time.Millisecond):
			return false
		}
	}
}

// registerBlankImages registers a blank golden disk and an empty runtime
// ISO: QEMU runs on them (the firmware finds nothing to boot) and listens on
// its guest port, which is all a start needs.
func registerBlankImages(t *testing.T, bin qemu.Binaries, h home.Layout) {
	t.Helper()
	const version = "20260101T000000Z-blank"
	golden := h.Golden(version)
	if out, err := exec.Command(bin.Img, "create", "-q", "-f", "qcow2", golden, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	runtime := h.Runtime(version)
	if err := isofs.Write(runtime, protocol.RuntimeVolumeLabel, map[string][]byte{"manifest.json": []byte("{}")}, home.PrivateFileMode); err != nil {
		t.Fatal(err)
	}
	for kind, file := range map[home.ImageKind]string{home.Golden: golden, home.Runtime: runtime} {
		sum, size, err := artifact.FileSHA256(file)
		if err != nil {
			t.Fatal(err)
		}
		m := protocol.ImageManifest{Kind: string(kind), Version: version, File: filepath.Base(file), SHA256: sum, Size: size, Created: time.Now().UTC().Format(time.RFC3339)}
		if err := artifact.WriteManifest(h.ImageManifest(kind, version), m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestComputerOnAFullDiskRunsWhenSpaceReturns boots the test image: the
// Computer's first start meets the full disk (DiskFull), and once the space
// returns the reconciles that follow the retry time start it and its guest
// answers: RUNNING and Ready.
func TestComputerOnAFullDiskRunsWhenSpaceReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	bin, err := qemu.FindBinaries(os.Getenv)
	if err != nil {
		t.Skipf("QEMU is not installed (%v); CI installs qemu-system-x86 and qemu-utils", err)
	}
	src := testImageHome(t)
	root, ok := smallfs.Mount(t, "8m")
	if !ok {
		return
	}
	h := home.Layout{Root: filepath.Join(root, "home")}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src.Images())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// The images stay on the roomy disk: registered images are
		// read-only inputs, and the home's own writes are the test.
		if err := os.Symlink(filepath.Join(src.Images(), e.Name()), filepath.Join(h.Images(), e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	cfg := hostconfig.Config{Accelerator: hostconfig.TCG}
	ctx := context.Background()
	d, err := qemu.New(ctx, qemu.Options{Home: h, Config: &cfg, Binaries: bin})
	if err != nil {
		t.Fatal(err)
	}
	comp := testComputer("full", dotsv1.RunAlways)
	comp.Spec.CPU, comp.Spec.Memory = 1, resource.MustParse("512Mi")
	r, c := newTestReconciler(d, comp)
	clk := r.Clock.(*clocktesting.FakePassiveClock)
	t.Cleanup(func() {
		if _, err := d.Kill(context.Background(), VMID(comp)); err != nil {
			t.Errorf("kill the VM at the end of the test: %v", err)
		}
		if err := d.Destroy(context.Background(), VMID(comp)); err != nil {
			t.Errorf("destroy the VM at the end of the test: %v", err)
		}
	})

	filler := smallfs.Fill(t, root)
	reconcileOnce(t, r, comp.Name)
	got := getComputer(c, comp.Name)
	if ready := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition); ready == nil || ready.Reason != dotsv1.DiskFullReason {
		t.Fatalf("Ready on a full disk = %+v; want reason %s", ready, dotsv1.DiskFullReason)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(diskFullRetry))
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		reconcileOnce(t, r, comp.Name)
		got = getComputer(c, comp.Name)
		if got.Status.State == dotsv1.ComputerRunning && meta.IsStatusConditionTrue(got.Status.Conditions, dotsv1.ReadyCondition) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not RUNNING and Ready %s after the space returned: state %s, Ready %+v", time.Since(start), got.Status.State, meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("RUNNING and Ready %s after the space returned (tcg)", time.Since(start).Round(100*time.Millisecond))
	if got.Status.StartFailure != nil {
		t.Errorf("startFailure %+v after the guest answered; want it cleared", got.Status.StartFailure)
	}
}

var (
	imageOnce sync.Once
	imageHome string
	imageErr  error
	imageSkip string
)

// TestMain removes the test image's home once every test is done: it is
// built once per test binary, so no test's cleanup can own it.
func TestMain(m *testing.M) {
	code := m.Run()
	if imageHome != "" {
		_ = os.RemoveAll(imageHome)
	}
	os.Exit(code)
}

// testImageHome is a home with the test image registered, built once per
// test binary as the driver's tests build it (the builder's cache under
// _output makes every build after the first quick).
func testImageHome(t *testing.T) home.Layout {
	t.Helper()
	imageOnce.Do(func() {
		wd, _ := os.Getwd()
		repo := filepath.Join(wd, "..", "..")
		if _, err := os.Stat(filepath.Join(repo, "hostagent/images/cmd/test-image/main.go")); err != nil {
			imageSkip = "the test image builder (hostagent/images/cmd/test-image) is not in this checkout"
			return
		}
		if imageHome, imageErr = os.MkdirTemp("", "computer-image-home-"); imageErr != nil {
			return
		}
		cmd := exec.Command("go", "run", "./hostagent/images/cmd/test-image", "--home", imageHome)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
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
