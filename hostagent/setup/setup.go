// Package setup makes a Linux host ready (ref 11.2): it runs the doctor, then
// fixes only what is missing. It installs qemu-system-x86, qemu-utils and
// postgresql with apt-get (directly as root, through sudo otherwise; the
// equivalent dnf or pacman line is printed, not guessed, elsewhere), prints
// the kvm group line when /dev/kvm is not accessible, and records the CPU
// model override in host.yaml when the doctor's probe needs it. Every command
// goes through an injected Runner, so tests exercise the steps without
// installing anything.
package setup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Runner runs one command, its output going to the person.
type Runner func(ctx context.Context, argv ...string) error

// Deps is what setup uses from the machine.
type Deps struct {
	Doctor doctor.Deps
	Run    Runner
	// Out receives what setup prints.
	Out io.Writer
	// Euid is the effective user id (root installs without sudo).
	Euid int
	// User is who gets the kvm group line: the person setup acts for
	// (home.ForPerson).
	User string
	// ForOther: setup runs as root for User (under sudo). The doctor's
	// probe then runs QEMU as root, where /dev/kvm always opens, so
	// Doctor.OpenKVM (KVMFor) is asked for User even when the probe passed.
	ForOther bool
	// Later names the doctor rows a later step of setup --all makes ready
	// (the images): setup does not fail on them.
	Later map[string]bool
	// LookPath finds a package manager.
	LookPath func(string) (string, error)
}

// Real returns the dependencies of the running machine.
func Real(d doctor.Deps, out io.Writer) Deps {
	user := cmp.Or(os.Getenv("SUDO_USER"), os.Getenv("USER"), "$USER")
	return Deps{
		Doctor: d, Out: out, Euid: os.Geteuid(), User: user, LookPath: exec.LookPath,
		Run: func(ctx context.Context, argv ...string) error {
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, out
			// apt-get must not stop to ask anything.
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			return cmd.Run()
		},
	}
}

// Debian packages per doctor row: hack/deps' host group (`hack/deps --list
// host`), the one list make run, make test and CI install from; deps_test.go
// keeps the two equal.
var packages = map[string]string{
	doctor.RowQEMU:     "qemu-system-x86",
	doctor.RowQEMUImg:  "qemu-utils",
	doctor.RowPostgres: "postgresql",
}

// Run runs the doctor, fixes what setup can, and returns the doctor's report
// after the fixes. The error says what is still wrong and what to do.
func Run(ctx context.Context, d Deps) (doctor.Report, error) {
	rep := doctor.Run(ctx, d.Doctor)
	fmt.Fprint(d.Out, doctor.Render(rep))

	// 1. Packages.
	var pkgs []string
	for _, row := range []string{doctor.RowQEMU, doctor.RowQEMUImg, doctor.RowPostgres} {
		if c, ok := rep.Row(row); ok && c.Status != doctor.OK {
			if row == doctor.RowQEMU && d.Doctor.Getenv(home.EnvQEMUDir) != "" {
				// A QEMU of the person's own choosing: not ours to install.
				continue
			}
			pkgs = append(pkgs, packages[row])
		}
	}
	if len(pkgs) > 0 {
		if err := install(ctx, d, pkgs); err != nil {
			return rep, err
		}
		rep = doctor.Run(ctx, d.Doctor)
	}

	// 2. The accelerator: the group line, or the CPU model decision.
	var todo []string
	groupLine := func() {
		line := "sudo usermod -aG kvm " + d.User
		fmt.Fprintf(d.Out, "\n/dev/kvm is not accessible to %s. Run:\n  %s\nthen log in again (a new login picks up the group).\n", d.User, line)
		todo = append(todo, line+" and log in again")
	}
	if c, ok := rep.Row(doctor.RowAccelerator); ok && c.Status == doctor.Missing {
		if kvmErr := d.Doctor.OpenKVM(); kvmErr != nil && !errors.Is(kvmErr, os.ErrNotExist) {
			groupLine()
		} else {
			todo = append(todo, c.Fix)
		}
	} else if ok && d.ForOther && c.Status == doctor.OK {
		// The probe ran as root; the server runs as User.
		if kvmErr := d.Doctor.OpenKVM(); kvmErr != nil && !errors.Is(kvmErr, os.ErrNotExist) {
			groupLine()
		}
	}
	if c, ok := rep.Row(doctor.RowCPUModel); ok && c.Status == doctor.Failed {
		if err := recordCPUModel(ctx, d); err != nil {
			return rep, err
		}
		rep = doctor.Run(ctx, d.Doctor)
	}

	fmt.Fprint(d.Out, "\nafter setup:\n"+doctor.Render(rep))
	if len(todo) > 0 {
		return rep, fmt.Errorf("setup could not finish: %s", strings.Join(todo, "; "))
	}
	if c, ok := rep.Row(doctor.RowOpenRouterKey); ok && c.Status != doctor.OK {
		// Not setup's to do (ref 11.4): the key is the person's, stored
		// through the server once it runs.
		fmt.Fprintf(d.Out, "\nthen store the OpenRouter key: %s\n", c.Fix)
	}
	for _, c := range rep.Checks {
		if (c.Status == doctor.Missing || c.Status == doctor.Failed) && c.Name != doctor.RowOpenRouterKey && !d.Later[c.Name] {
			return rep, errors.New("setup finished but some checks still fail: see the fix lines above")
		}
	}
	return rep, nil
}

// install runs apt-get, as root directly and through sudo otherwise.
func install(ctx context.Context, d Deps, pkgs []string) error {
	if _, err := d.LookPath("apt-get"); err != nil {
		fmt.Fprintln(d.Out, "\nno apt-get on this host; install these yourself:")
		fmt.Fprintf(d.Out, "  dnf:    sudo dnf install -y qemu-system-x86-core qemu-img postgresql-server\n")
		fmt.Fprintf(d.Out, "  pacman: sudo pacman -S --needed qemu-base postgresql\n")
		return fmt.Errorf("install %s with the host's package manager (lines above)", strings.Join(pkgs, " "))
	}
	var prefix []string
	if d.Euid != 0 {
		if _, err := d.LookPath("sudo"); err != nil {
			return fmt.Errorf("installing %s needs root: run invisible-dots setup as root, or install sudo", strings.Join(pkgs, " "))
		}
		prefix = []string{"sudo"}
	}
	for _, argv := range [][]string{
		append(append([]string{}, prefix...), "apt-get", "update"),
		append(append(append([]string{}, prefix...), "apt-get", "install", "-y"), pkgs...),
	} {
		fmt.Fprintf(d.Out, "\n$ %s\n", strings.Join(argv, " "))
		if err := d.Run(ctx, argv...); err != nil {
			return fmt.Errorf("%s failed: %w; run it yourself and then invisible-dots doctor", strings.Join(argv, " "), err)
		}
	}
	return nil
}

// recordCPUModel writes the override to host.yaml when the probe fails with
// the default model and passes with the override (DESIGN.md 5). Nothing is
// recorded on a guess: both probes run here again.
func recordCPUModel(ctx context.Context, d Deps) error {
	cfg, err := hostconfig.Load(d.Doctor.Home)
	if err != nil {
		return err
	}
	bins, err := qemu.FindBinaries(d.Doctor.Getenv)
	if err != nil {
		return err
	}
	accel := cfg.EffectiveAccelerator()
	defErr := doctor.Probe(ctx, d.Doctor, bins.System, accel, hostconfig.CPUModel)
	if defErr == nil {
		return nil
	}
	if err := doctor.Probe(ctx, d.Doctor, bins.System, accel, hostconfig.CPUModelNoArchCapabilities); err != nil {
		return fmt.Errorf("neither CPU model runs here (%v; %v): check KVM on this host", defErr, err)
	}
	cfg.CPUModel = hostconfig.CPUModelNoArchCapabilities
	cfg.CPUModelReason = defErr.Error()
	if err := hostconfig.Save(d.Doctor.Home, cfg); err != nil {
		return err
	}
	fmt.Fprintf(d.Out, "\nrecorded cpuModel %s in %s (the probe failed with %s)\n", cfg.CPUModel, d.Doctor.Home.HostConfig(), hostconfig.CPUModel)
	return nil
}
