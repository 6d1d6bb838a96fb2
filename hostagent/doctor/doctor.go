// Package doctor checks that this host can run Dots (ref 11.1, Linux): QEMU
// and its version, qemu-img, the accelerator (confirmed by actually running
// QEMU), the CPU model, the home path, the images, PostgreSQL, and the
// OpenRouter key stored (asked of the server the home's kubeconfig names). It
// changes nothing: the one file it writes, a probe of the home's filesystem,
// is removed at once. Every row that is not ok names the command that fixes
// it, one a person pastes into a shell as it is, and beside it what the
// command does and what else to do (FixWhy). The CLI and the server's
// /dots/v1/doctor render the same Report.
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
	"github.com/invisible-dots/invisible-dots/hostagent/hostfix"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// The report's types are the wire's: the command line prints them and the
// server's /dots/v1/doctor answers them, and a client reads them without
// linking this package.
type (
	// Status of one check.
	Status = wire.DoctorStatus
	// Check is one row of the report.
	Check = wire.DoctorCheck
	// Report is the doctor's answer.
	Report = wire.DoctorReport
)

const (
	OK      = wire.DoctorOK
	Missing = wire.DoctorMissing
	Failed  = wire.DoctorFailed
	Warning = wire.DoctorWarning
)

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

// The fixes, named once: each a command and the words beside it.
var (
	fixInstallQEMU = fix{"sudo apt-get install -y qemu-system-x86",
		"installs QEMU (invisible-dots setup installs every package the doctor finds missing)"}
	fixInstallQEMUImg = fix{"sudo apt-get install -y qemu-utils",
		"installs qemu-img (invisible-dots setup installs every package the doctor finds missing)"}
	fixInstallPostgres = fix{"sudo apt-get install -y postgresql",
		"installs PostgreSQL's server, which invisible-dots server runs in its home; or set DATABASE_URL to an existing server instead (invisible-dots setup installs every package the doctor finds missing)"}
	fixKVMGroup       = fix(hostfix.KVMGroup)
	fixKVMModule      = fix(hostfix.KVMModule)
	fixKVMRuns        = fix(hostfix.KVMRuns)
	fixRecordCPUModel = fix(hostfix.RecordCPUModel)
	// The golden row wants a full golden image, which only image build
	// makes; the runtime ISO is built by either.
	fixGolden  = fix{"invisible-dots image build", "builds the golden image with the desktop and the runtime ISO, and registers them (it takes a while)"}
	fixRuntime = fix{"invisible-dots image build", "builds the runtime ISO and the golden image, and registers them (in a checkout, make test-image builds the small test images instead)"}
	// The key is read on standard input: the command asks for it.
	fixOpenRouterKey = fix{"invisible-dots secret openrouter",
		"stores the host-wide OpenRouter key, the key of every Dot without its own: it asks for the key (or reads it piped in) and never echoes it"}
	fixStartServer = fix{"invisible-dots server",
		"starts the server this home runs; the key is stored through it, then: invisible-dots secret openrouter"}
)

// fix is a command and the words beside it (hostfix.Fix, the fixes a failed
// QEMU start names too, converts to it).
type fix hostfix.Fix

// on sets the fix of a row.
func (f fix) on(c Check) Check {
	c.Fix, c.FixWhy = f.Cmd, f.Why
	return c
}

// shellQuote quotes a word for a POSIX shell when it needs it: a path
// given in a fix is pasted as it is.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

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
		add(fixFor(d, bins, fixInstallQEMU).on(Check{Name: RowQEMU, Status: Missing, Detail: errText(findErr)}))
	default:
		res, err := d.Run(ctx, 10*time.Second, bins.System, "--version")
		v, perr := qemu.ParseVersion(res.Output)
		switch {
		case err != nil || res.ExitCode != 0 || perr != nil:
			add(fixFor(d, bins, fixInstallQEMU).on(Check{Name: RowQEMU, Status: Failed, Detail: fmt.Sprintf("%s --version did not answer: %s", bins.System, firstLine(errText(err)+res.Output))}))
		case v.Less(hostconfig.MinQEMU):
			add(fixFor(d, bins, fixInstallQEMU).on(Check{Name: RowQEMU, Status: Failed, Detail: fmt.Sprintf("%s is QEMU %s; %s or newer is needed", bins.System, v, hostconfig.MinQEMU)}))
		default:
			qemuOK = true
			add(Check{Name: RowQEMU, Status: OK, Detail: fmt.Sprintf("%s, QEMU %s", bins.System, v)})
		}
	}

	// qemu-img.
	if bins.Img != "" && fileExists(bins.Img) {
		add(Check{Name: RowQEMUImg, Status: OK, Detail: bins.Img})
	} else {
		add(fixFor(d, bins, fixInstallQEMUImg).on(Check{Name: RowQEMUImg, Status: Missing, Detail: "qemu-img not found"}))
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

// fixFor names the QEMU directory when INVISIBLE_DOTS_QEMU_DIR chose it:
// the command uses the system's QEMU instead, and the words say the other way.
func fixFor(_ Deps, b Binaries, f fix) fix {
	if b.Dir != "" {
		return fix{"unset " + home.EnvQEMUDir + " && " + f.Cmd,
			home.EnvQEMUDir + " chooses " + b.Dir + ", which holds no usable QEMU: the command drops it for the system's QEMU, which it installs (then start the server from that shell); or install QEMU into " + b.Dir}
	}
	return f
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
		cfgFile := shellQuote(d.Home.HostConfig())
		return []Check{fix{"mv " + cfgFile + " " + cfgFile + ".bad && invisible-dots setup",
			"host.yaml cannot be read (the detail says why): the command sets it aside and setup writes it again; or correct it by hand"}.on(
			Check{Name: RowAccelerator, Status: Failed, Detail: cfgErr.Error()})}
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
			fixInstallQEMU.on(Check{Name: RowAccelerator, Status: Failed, Detail: "not probed: QEMU is not usable"}),
			modelRow,
		}
	}
	if accel == hostconfig.TCG {
		row := fix{"sed -i '/^accelerator:/d' " + shellQuote(d.Home.HostConfig()),
			"removes 'accelerator: tcg' from host.yaml, so the Dots use kvm (tcg is for test hosts only)"}.on(
			Check{Name: RowAccelerator, Status: Warning})
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
			row = fixKVMModule.on(row)
		} else {
			row = fixKVMGroup.on(row)
		}
		return []Check{row, modelRow}
	}
	row := Check{Name: RowAccelerator, Status: Failed, Detail: probeErr.Error()}
	if cfg.CPUModel == "" {
		// The recorded decision of DESIGN.md 5: on nested virtualization
		// the default model fails (MSR 0x10a) and this one runs.
		if Probe(ctx, d, bins.System, accel, hostconfig.CPUModelNoArchCapabilities) == nil {
			row.Detail += "; the probe passes with " + hostconfig.CPUModelNoArchCapabilities
			row = fixRecordCPUModel.on(row)
			modelRow = fixRecordCPUModel.on(modelRow)
			modelRow.Status = Failed
			modelRow.Detail = model + " does not run here; " + hostconfig.CPUModelNoArchCapabilities + " does"
			return []Check{row, modelRow}
		}
	}
	return []Check{fixKVMRuns.on(row), modelRow}
}

func homeDir(d Deps) Check {
	root := d.Home.Root
	if err := home.QEMUPathProblem(root); err != nil {
		return fix{"export " + home.EnvHome + "=" + shellQuote(plainPath(root)),
			"QEMU cannot be given this path: the command names the same place without the characters QEMU refuses (any plain ASCII path without a comma will do); start the server and the commands from that shell"}.on(
			Check{Name: RowHome, Status: Failed, Detail: err.Error()})
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
		return fix{"ls -ld " + shellQuote(p), "shows the owner and the mode of " + p + ", whose free space could not be read: it must be readable by the user who runs the server"}.on(
			Check{Name: RowHome, Status: Failed, Detail: fmt.Sprintf("%s: cannot read free space: %v", root, err)})
	}
	detail := fmt.Sprintf("%s, %.1f GiB free", root, float64(free)/(1<<30))
	if p == root {
		// What the filesystem says is free is not always what it gives
		// (reserved blocks, a quota, a read-only remount): a small file is
		// written, synced and removed.
		if err := home.ProbeWrite(root); home.DiskFull(err) {
			return diskFull(d.Home).on(Check{Name: RowHome, Status: Failed, Detail: detail + "; the disk is full: " + err.Error()})
		} else if err != nil {
			return fix{"ls -ld " + shellQuote(root), "shows the home's owner and mode: the home must be writable by the user who runs the server (fix its owner, its mode or its mount)"}.on(
				Check{Name: RowHome, Status: Failed, Detail: detail + "; the home cannot be written: " + err.Error()})
		}
	}
	if w, ok := d.Home.LastFullWrite(); ok {
		// The server's doctor remembers what its agent met.
		return diskFull(d.Home).on(Check{Name: RowHome, Status: Failed, Detail: detail + "; the disk refused a write: " + w.String()})
	}
	if free < MinFreeBytes {
		return fix{"df -h " + shellQuote(p), fmt.Sprintf("shows how full the filesystem of %s is: free at least %d GiB there, or set %s to a home on a larger one", p, MinFreeBytes>>30, home.EnvHome)}.on(
			Check{Name: RowHome, Status: Failed, Detail: detail + fmt.Sprintf(" (under %d GiB)", MinFreeBytes>>30)})
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
		return fixGolden.on(Check{Name: RowGolden, Status: Missing, Detail: detail})
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
		return fixRuntime.on(Check{Name: RowRuntime, Status: st, Detail: err.Error()})
	}
	return verified(RowRuntime, img, fixRuntime)
}

// verified re-hashes a registered image against its manifest.
func verified(row string, img images.Image, f fix) Check {
	m, err := img.Verify()
	if err != nil {
		return f.on(Check{Name: row, Status: Failed, Detail: err.Error()})
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
	return fixInstallPostgres.on(Check{Name: RowPostgres, Status: Missing, Detail: "no PostgreSQL server binaries (initdb, postgres) on PATH or in /usr/lib/postgresql/*/bin"})
}

func openRouterKey(ctx context.Context, d Deps) Check {
	stored, err := d.OpenRouterKey(ctx)
	where := "Secret " + dotsv1.SystemNamespace + "/" + dotsv1.DefaultKeySecretName
	switch {
	case err != nil:
		// Not a failure of the host: the key is stored through the server.
		return fixStartServer.on(Check{Name: RowOpenRouterKey, Status: Warning, Detail: err.Error()})
	case !stored:
		return fixOpenRouterKey.on(Check{Name: RowOpenRouterKey, Status: Missing, Detail: "no default key in " + where + ": a Dot without a key of its own waits for one"})
	}
	return Check{Name: RowOpenRouterKey, Status: OK, Detail: "the default key is in " + where}
}

// diskFull is the fix of a full disk under the home: the command that shows
// the filesystem, and the step (internal/home says both).
func diskFull(h home.Layout) fix {
	return fix{"df -h " + shellQuote(h.Root), h.DiskFullWhy()}
}

// plainPath is path with what QEMU refuses (a comma, a character that is
// not printable ASCII) turned into a dash: the same place, a path QEMU takes.
func plainPath(path string) string {
	return strings.Map(func(r rune) rune {
		if r == ',' || r < 0x20 || r > 0x7e {
			return '-'
		}
		return r
	}, path)
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

// Render writes the report as one line per check, and under a row that is
// not ok its fix: the command on a line of its own (copied as it is), and
// what it does on the next.
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
			if c.FixWhy != "" {
				fmt.Fprintf(&b, "        %-*s  why: %s\n", width, "", c.FixWhy)
			}
		}
	}
	return b.String()
}
