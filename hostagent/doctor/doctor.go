// Package doctor checks that this host can run Dots (ref 11.1, Linux): QEMU
// and its version, qemu-img, the accelerator (confirmed by actually running
// QEMU), the CPU model, the home path, the images, PostgreSQL, and the
// OpenRouter key stored (asked of the server the home's kubeconfig names). It
// changes nothing: the one file it writes, a probe of the home's filesystem,
// is removed at once. Every row that is not ok names the
// command that fixes it. The CLI and the server's /dots/v1/doctor render the
// same Report.
package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Status of one check.
type Status string

const (
	OK      Status = "ok"
	Missing Status = "missing"
	Failed  Status = "failed"
	// Warning: works, but not as production should (accelerator: tcg).
	Warning Status = "warning"
)

// Check is one row of the report.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	// Fix is the command (or the step) that fixes a row that is not ok.
	Fix string `json:"fix,omitempty"`
}

// Report is the doctor's answer.
type Report struct {
	Checks []Check `json:"checks"`
	// OK is true when no row is missing or failed (warnings allowed): the
	// host can run Dots.
	OK bool `json:"ok"`
	// Ready is true when every row is ok (ref 11.1): what a script that
	// gates on the doctor asks. ExitCode is the command's: ExitReady,
	// ExitWarnings or ExitNotOK.
	Ready    bool `json:"ready"`
	ExitCode int  `json:"exitCode"`
}

// The doctor command's exit codes.
const (
	// ExitReady: every check is ok.
	ExitReady = 0
	// ExitNotOK: a check is missing or failed.
	ExitNotOK = 1
	// ExitWarnings: nothing is missing or failed, but a row warns (tcg,
	// the server down, the web client not built).
	ExitWarnings = 2
)

// Row returns the check of a name, for setup and tests.
func (r Report) Row(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Row names, in report order.
const (
	RowQEMU        = "qemu"
	RowQEMUImg     = "qemu-img"
	RowAccelerator = "accelerator"
	RowCPUModel    = "cpu model"
	RowHome        = "home"
	RowGolden      = "golden image"
	RowRuntime     = "runtime image"
	RowPostgres    = "postgresql"
	// RowOpenRouterKey: the host-wide default OpenRouter key is stored.
	RowOpenRouterKey = "OpenRouter key stored"
)

// Result is what a command run by the doctor did.
type Result struct {
	Output   string // standard output and error, combined
	ExitCode int    // -1 when it did not exit by itself (timeout)
	TimedOut bool
}

// Runner runs a program by absolute path. Tests inject one.
type Runner func(ctx context.Context, timeout time.Duration, argv ...string) (Result, error)

// Deps is what the doctor reads from the machine. Real() fills them.
type Deps struct {
	Home   home.Layout
	Getenv func(string) string
	Run    Runner
	// OpenKVM opens /dev/kvm read-write and closes it.
	OpenKVM func() error
	// FreeBytes returns the free space of the file system holding a path.
	FreeBytes func(path string) (uint64, error)
	// PostgresDirs lists candidate directories of PostgreSQL server binaries.
	PostgresDirs func() []string
	// ProbeTimeout bounds the accelerator probe (ref 11.1: 30 s).
	ProbeTimeout time.Duration
	// OpenRouterKey reports whether the default OpenRouter key's Secret
	// exists and holds a key, asking the API server of the home's
	// kubeconfig. ErrNotChecked (wrapped) when it cannot be asked. Nil
	// leaves the row out.
	OpenRouterKey func(ctx context.Context) (bool, error)
	// WebClientBuilt reports whether this binary embeds the built web
	// client. Nil leaves the row out.
	WebClientBuilt func() bool
}

// ErrNotChecked: the doctor could not ask (no kubeconfig yet, the server does
// not answer).
var ErrNotChecked = errors.New("not checked")

// MinFreeBytes is the free space below which the home row fails: an overlay
// grows with the guest's writes, and PostgreSQL needs room.
const MinFreeBytes = 2 << 30

// Real returns the dependencies of the running machine.
func Real(h home.Layout) Deps {
	return Deps{
		Home:   h,
		Getenv: os.Getenv,
		Run:    RunCommand,
		OpenKVM: func() error {
			f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
			if err != nil {
				return err
			}
			return f.Close()
		},
		FreeBytes: func(p string) (uint64, error) {
			var st syscall.Statfs_t
			if err := syscall.Statfs(p, &st); err != nil {
				return 0, err
			}
			return st.Bavail * uint64(st.Bsize), nil
		},
		PostgresDirs:  postgresDirs,
		ProbeTimeout:  30 * time.Second,
		OpenRouterKey: keyStored(h),
		// The row is the binary's: the doctor answers for the binary it runs in.
		WebClientBuilt: webClientBuilt,
	}
}

// keyStored asks the API server of the home's kubeconfig for the default
// key's Secret. Reading it changes nothing.
func keyStored(h home.Layout) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		if _, err := os.Stat(h.Kubeconfig()); err != nil {
			return false, fmt.Errorf("%w: no kubeconfig at %s (the server has not run in this home yet)", ErrNotChecked, h.Kubeconfig())
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
		if err != nil {
			return false, fmt.Errorf("%w: read %s: %v", ErrNotChecked, h.Kubeconfig(), err)
		}
		cfg.Timeout = 5 * time.Second
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return false, fmt.Errorf("%w: %v", ErrNotChecked, err)
		}
		sec, err := cs.CoreV1().Secrets(dotsv1.SystemNamespace).Get(ctx, dotsv1.DefaultKeySecretName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("%w: the API server of %s did not answer: %v", ErrNotChecked, h.Kubeconfig(), err)
		}
		return len(sec.Data[dotsv1.OpenRouterKeySecretKey]) > 0, nil
	}
}

// RunCommand runs argv with a timeout, killing it when the time is up.
func RunCommand(ctx context.Context, timeout time.Duration, argv ...string) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Stdin = nil
	err := cmd.Run()
	res := Result{Output: out.String()}
	if ctx.Err() == context.DeadlineExceeded {
		res.TimedOut, res.ExitCode = true, -1
		return res, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
		return res, nil
	}
	if err != nil {
		return res, err
	}
	return res, nil
}

// postgresDirs: PATH's postgres first, then Debian's versioned directories,
// newest first (the same places internal/postgres looks).
func postgresDirs() []string {
	var dirs []string
	if p, err := exec.LookPath("postgres"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(matches)))
	return append(dirs, matches...)
}

// The fixes, named once.
const (
	fixInstallQEMU     = "sudo apt-get install -y qemu-system-x86 (or: invisible-dots setup)"
	fixInstallQEMUImg  = "sudo apt-get install -y qemu-utils (or: invisible-dots setup)"
	fixInstallPostgres = "sudo apt-get install -y postgresql (or: invisible-dots setup), or set DATABASE_URL to an existing server"
	fixKVMGroup        = "sudo usermod -aG kvm $USER, then log in again"
	fixKVMModule       = "enable virtualization (VT-x/AMD-V) in the firmware, then sudo modprobe kvm_intel (or kvm_amd)"
	fixRecordCPUModel  = "invisible-dots setup (records cpuModel " + hostconfig.CPUModelNoArchCapabilities + " in host.yaml)"
	fixTCG             = "remove 'accelerator: tcg' from %s to use kvm (tcg is for test hosts only)"
	// The golden row wants a full golden image, which only image build
	// makes; the runtime ISO is built by either.
	fixGolden        = "invisible-dots image build"
	fixRuntime       = "invisible-dots image build (or make test-image)"
	fixOpenRouterKey = "invisible-dots secret openrouter"
	fixStartServer   = "start invisible-dots server, then: invisible-dots secret openrouter"
)

// Run checks the host. It never fails: a check that cannot run is a row.
func Run(ctx context.Context, d Deps) Report {
	var rows []Check
	add := func(c Check) { rows = append(rows, c) }

	cfg, cfgErr := hostconfig.Load(d.Home)
	bins, findErr := qemu.FindBinaries(d.Getenv)

	// QEMU and its version.
	qemuOK := false
	switch {
	case bins.System == "" || (findErr != nil && !fileExists(bins.System)):
		add(Check{Name: RowQEMU, Status: Missing, Detail: errText(findErr), Fix: fixFor(d, bins, fixInstallQEMU)})
	default:
		res, err := d.Run(ctx, 10*time.Second, bins.System, "--version")
		v, perr := qemu.ParseVersion(res.Output)
		switch {
		case err != nil || res.ExitCode != 0 || perr != nil:
			add(Check{Name: RowQEMU, Status: Failed, Detail: fmt.Sprintf("%s --version did not answer: %s", bins.System, firstLine(errText(err)+res.Output)), Fix: fixFor(d, bins, fixInstallQEMU)})
		case v.Less(hostconfig.MinQEMU):
			add(Check{Name: RowQEMU, Status: Failed, Detail: fmt.Sprintf("%s is QEMU %s; %s or newer is needed", bins.System, v, hostconfig.MinQEMU), Fix: fixFor(d, bins, fixInstallQEMU)})
		default:
			qemuOK = true
			add(Check{Name: RowQEMU, Status: OK, Detail: fmt.Sprintf("%s, QEMU %s", bins.System, v)})
		}
	}

	// qemu-img.
	if bins.Img != "" && fileExists(bins.Img) {
		add(Check{Name: RowQEMUImg, Status: OK, Detail: bins.Img})
	} else {
		add(Check{Name: RowQEMUImg, Status: Missing, Detail: "qemu-img not found", Fix: fixFor(d, bins, fixInstallQEMUImg)})
	}

	// Accelerator and CPU model.
	rows = append(rows, accelerator(ctx, d, cfg, cfgErr, bins, qemuOK)...)

	// Home path and free space.
	add(homeDir(d))

	// Images.
	add(goldenImage(d))
	add(runtimeImage(d))

	// PostgreSQL.
	add(postgres(d))

	if d.WebClientBuilt != nil {
		add(webClient(d))
	}

	// The OpenRouter key.
	if d.OpenRouterKey != nil {
		add(openRouterKey(ctx, d))
	}

	rep := Report{Checks: rows, OK: true, Ready: true}
	for _, c := range rows {
		if c.Status == Missing || c.Status == Failed {
			rep.OK = false
		}
		if c.Status != OK {
			rep.Ready = false
		}
	}
	switch {
	case !rep.OK:
		rep.ExitCode = ExitNotOK
	case !rep.Ready:
		rep.ExitCode = ExitWarnings
	}
	return rep
}

// fixFor names the QEMU directory when INVISIBLE_DOTS_QEMU_DIR chose it.
func fixFor(_ Deps, b Binaries, fix string) string {
	if b.Dir != "" {
		return "install QEMU into " + b.Dir + " or unset " + home.EnvQEMUDir + "; " + fix
	}
	return fix
}

// Binaries is qemu.Binaries, named here for fixFor's signature.
type Binaries = qemu.Binaries

// ProbeArgs is the accelerator probe of ref 11.1: the Dots' machine type,
// accelerator and CPU model, no devices; the firmware finds nothing to boot,
// reboot-timeout=0 resets at once and -no-reboot turns the reset into exit
// code 0. So 0 means the accelerator opened AND ran the CPU model.
func ProbeArgs(binary, accel, cpuModel string) []string {
	return []string{binary, "-nodefaults", "-no-user-config", "-machine", "q35", "-accel", accel, "-cpu", cpuModel,
		"-display", "none", "-no-reboot", "-boot", "reboot-timeout=0"}
}

// Probe runs the probe and returns nil when QEMU exited with code 0.
func Probe(ctx context.Context, d Deps, binary, accel, cpuModel string) error {
	timeout := d.ProbeTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	res, err := d.Run(ctx, timeout, ProbeArgs(binary, accel, cpuModel)...)
	switch {
	case err != nil:
		return fmt.Errorf("run the probe: %w", err)
	case res.TimedOut:
		return fmt.Errorf("the probe with -accel %s -cpu %s still ran after %s and was killed: a virtual CPU that does not run (%s)", accel, cpuModel, timeout, firstLine(res.Output))
	case res.ExitCode < 0:
		return fmt.Errorf("the probe with -accel %s -cpu %s was ended by a signal: %s", accel, cpuModel, firstLine(res.Output))
	case res.ExitCode != 0:
		return fmt.Errorf("the probe with -accel %s -cpu %s exited with code %d: %s", accel, cpuModel, res.ExitCode, firstLine(res.Output))
	}
	return nil
}

func accelerator(ctx context.Context, d Deps, cfg hostconfig.Config, cfgErr error, bins Binaries, qemuOK bool) []Check {
	if cfgErr != nil {
		return []Check{{Name: RowAccelerator, Status: Failed, Detail: cfgErr.Error(), Fix: "fix or remove " + d.Home.HostConfig() + ", then invisible-dots setup"}}
	}
	accel, model := cfg.EffectiveAccelerator(), cfg.EffectiveCPUModel()
	modelRow := Check{Name: RowCPUModel, Status: OK, Detail: model + " (default for " + accel + ")"}
	if cfg.CPUModel != "" {
		modelRow.Detail = model + " (recorded in " + d.Home.HostConfig()
		if cfg.CPUModelReason != "" {
			modelRow.Detail += ": " + cfg.CPUModelReason
		}
		modelRow.Detail += ")"
	}
	if !qemuOK {
		return []Check{
			{Name: RowAccelerator, Status: Failed, Detail: "not probed: QEMU is not usable", Fix: fixInstallQEMU},
			modelRow,
		}
	}
	if accel == hostconfig.TCG {
		row := Check{Name: RowAccelerator, Status: Warning, Fix: fmt.Sprintf(fixTCG, d.Home.HostConfig())}
		if err := Probe(ctx, d, bins.System, accel, model); err != nil {
			row.Status, row.Detail = Failed, err.Error()
		} else {
			row.Detail = "tcg (set in " + d.Home.HostConfig() + "): software emulation, for test hosts only; the probe ran"
		}
		return []Check{row, modelRow}
	}

	kvmErr := d.OpenKVM()
	probeErr := Probe(ctx, d, bins.System, accel, model)
	if probeErr == nil {
		// The probe has the last word (ref 11.1).
		detail := "kvm: the probe ran the CPU model " + model
		if kvmErr != nil {
			detail += " (although /dev/kvm did not open: " + kvmErr.Error() + ")"
		}
		return []Check{{Name: RowAccelerator, Status: OK, Detail: detail}, modelRow}
	}
	if kvmErr != nil {
		row := Check{Name: RowAccelerator, Status: Missing, Detail: "/dev/kvm does not open read-write: " + kvmErr.Error()}
		if errors.Is(kvmErr, os.ErrNotExist) {
			row.Fix = fixKVMModule
		} else {
			row.Fix = fixKVMGroup
		}
		return []Check{row, modelRow}
	}
	row := Check{Name: RowAccelerator, Status: Failed, Detail: probeErr.Error()}
	if cfg.CPUModel == "" {
		// The recorded decision of DESIGN.md 5: on nested virtualization
		// the default model fails (MSR 0x10a) and this one runs.
		if Probe(ctx, d, bins.System, accel, hostconfig.CPUModelNoArchCapabilities) == nil {
			row.Detail += "; the probe passes with " + hostconfig.CPUModelNoArchCapabilities
			row.Fix = fixRecordCPUModel
			modelRow.Status, modelRow.Fix = Failed, fixRecordCPUModel
			modelRow.Detail = model + " does not run here; " + hostconfig.CPUModelNoArchCapabilities + " does"
			return []Check{row, modelRow}
		}
	}
	row.Fix = "check that KVM runs guests on this host (nested virtualization enabled, no other hypervisor holding VT-x); " + fixKVMModule
	return []Check{row, modelRow}
}

func homeDir(d Deps) Check {
	root := d.Home.Root
	if err := home.QEMUPathProblem(root); err != nil {
		return Check{Name: RowHome, Status: Failed, Detail: err.Error(), Fix: "export " + home.EnvHome + "=/a/plain/ascii/path (no comma)"}
	}
	// The home may not exist yet: measure the nearest existing parent.
	p := root
	for {
		if _, err := os.Stat(p); err == nil || filepath.Dir(p) == p {
			break
		}
		p = filepath.Dir(p)
	}
	free, err := d.FreeBytes(p)
	if err != nil {
		return Check{Name: RowHome, Status: Failed, Detail: fmt.Sprintf("%s: cannot read free space: %v", root, err), Fix: "check that " + p + " is readable"}
	}
	detail := fmt.Sprintf("%s, %.1f GiB free", root, float64(free)/(1<<30))
	if p == root {
		// What the filesystem says is free is not always what it gives
		// (reserved blocks, a quota, a read-only remount): a small file is
		// written, synced and removed.
		if err := home.ProbeWrite(root); home.DiskFull(err) {
			return Check{Name: RowHome, Status: Failed, Detail: detail + "; the disk is full: " + err.Error(), Fix: d.Home.DiskFullFix()}
		} else if err != nil {
			return Check{Name: RowHome, Status: Failed, Detail: detail + "; the home cannot be written: " + err.Error(), Fix: "ls -ld " + root + "  (the home must be writable by the user who runs the server; fix its owner or mount)"}
		}
	}
	if w, ok := d.Home.LastFullWrite(); ok {
		// The server's doctor remembers what its agent met.
		return Check{Name: RowHome, Status: Failed, Detail: detail + "; the disk refused a write: " + w.String(), Fix: d.Home.DiskFullFix()}
	}
	if free < MinFreeBytes {
		return Check{Name: RowHome, Status: Failed, Detail: detail + fmt.Sprintf(" (under %d GiB)", MinFreeBytes>>30), Fix: "free space on the file system of " + p + ", or set " + home.EnvHome + " to a larger one"}
	}
	return Check{Name: RowHome, Status: OK, Detail: detail}
}

// goldenImage is the golden image row: a full golden image (the desktop,
// the browser; its manifest says Desktop) is registered and matches its
// manifest. The test image is a golden image to the driver, which boots it
// for the fast tests, but a Dot on it has no desktop: it does not pass.
func goldenImage(d Deps) Check {
	img, ok := images.LatestDesktop(d.Home)
	if !ok {
		detail := "no golden image with the desktop in " + d.Home.Images()
		if test, err := images.Latest(d.Home, home.Golden); err == nil {
			detail += " (" + filepath.Base(test.File) + " is the test image: no desktop, no browser)"
		}
		return Check{Name: RowGolden, Status: Missing, Detail: detail, Fix: fixGolden}
	}
	return verified(RowGolden, img, fixGolden)
}

func runtimeImage(d Deps) Check {
	img, err := images.Latest(d.Home, home.Runtime)
	if err != nil {
		st := Failed
		if errors.Is(err, images.ErrNoImage) {
			st = Missing
		}
		return Check{Name: RowRuntime, Status: st, Detail: err.Error(), Fix: fixRuntime}
	}
	return verified(RowRuntime, img, fixRuntime)
}

// verified re-hashes a registered image against its manifest.
func verified(row string, img images.Image, fix string) Check {
	m, err := img.Verify()
	if err != nil {
		return Check{Name: row, Status: Failed, Detail: err.Error(), Fix: fix}
	}
	detail := filepath.Base(img.File) + " matches its manifest"
	if m.Description != "" {
		detail += " (" + m.Description + ")"
	}
	return Check{Name: row, Status: OK, Detail: detail}
}

func postgres(d Deps) Check {
	if d.Getenv("DATABASE_URL") != "" {
		return Check{Name: RowPostgres, Status: OK, Detail: "DATABASE_URL is set: an external server (its reachability is checked at server start)"}
	}
	for _, dir := range d.PostgresDirs() {
		if fileExists(filepath.Join(dir, "postgres")) && fileExists(filepath.Join(dir, "initdb")) {
			return Check{Name: RowPostgres, Status: OK, Detail: "server binaries in " + dir}
		}
	}
	return Check{Name: RowPostgres, Status: Missing, Detail: "no PostgreSQL server binaries (initdb, postgres) on PATH or in /usr/lib/postgresql/*/bin", Fix: fixInstallPostgres}
}

func openRouterKey(ctx context.Context, d Deps) Check {
	stored, err := d.OpenRouterKey(ctx)
	where := "Secret " + dotsv1.SystemNamespace + "/" + dotsv1.DefaultKeySecretName
	switch {
	case err != nil:
		// Not a failure of the host: the key is stored through the server.
		return Check{Name: RowOpenRouterKey, Status: Warning, Detail: err.Error(), Fix: fixStartServer}
	case !stored:
		return Check{Name: RowOpenRouterKey, Status: Missing, Detail: "no default key in " + where + ": a Dot without a key of its own waits for one", Fix: fixOpenRouterKey}
	}
	return Check{Name: RowOpenRouterKey, Status: OK, Detail: "the default key is in " + where}
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	if s == "" {
		return "(no output)"
	}
	return s
}

// Render writes the report as one line per check, and the fix under a row
// that is not ok.
func Render(r Report) string {
	var b strings.Builder
	width := 0
	for _, c := range r.Checks {
		if len(c.Name) > width {
			width = len(c.Name)
		}
	}
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%-7s %-*s  %s\n", c.Status, width, c.Name, c.Detail)
		if c.Fix != "" && c.Status != OK {
			fmt.Fprintf(&b, "        %-*s  fix: %s\n", width, "", c.Fix)
		}
	}
	return b.String()
}
