package setup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// host is a fake Linux host: apt-get install "installs" by creating the
// programs the doctor looks for. Nothing real is installed.
type host struct {
	bin, pg   string
	installed map[string]bool
	kvmErr    error
	probe     map[string]int // exit code by CPU model
	ran       [][]string
	hasApt    bool
}

func newHost(t *testing.T) *host {
	return &host{bin: t.TempDir(), pg: t.TempDir(), installed: map[string]bool{}, hasApt: true,
		probe: map[string]int{hostconfig.CPUModel: 0}}
}

func (h *host) install(t *testing.T, pkg string) {
	h.installed[pkg] = true
	write := func(dir, name string) { os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755) }
	switch pkg {
	case "qemu-system-x86":
		write(h.bin, "qemu-system-x86_64")
	case "qemu-utils":
		write(h.bin, "qemu-img")
	case "postgresql":
		write(h.pg, "postgres")
		write(h.pg, "initdb")
	}
}

func (h *host) deps(t *testing.T, layout home.Layout, euid int) (Deps, *bytes.Buffer) {
	out := &bytes.Buffer{}
	env := map[string]string{"PATH": h.bin}
	dd := doctor.Deps{
		Home: layout, Getenv: func(k string) string { return env[k] },
		Run: func(_ context.Context, _ time.Duration, argv ...string) (doctor.Result, error) {
			if argv[len(argv)-1] == "--version" {
				return doctor.Result{Output: "QEMU emulator version 7.2.22"}, nil
			}
			for i, a := range argv {
				if a == "-cpu" {
					code, ok := h.probe[argv[i+1]]
					if !ok {
						code = 1
					}
					return doctor.Result{ExitCode: code, Output: "failed to set MSR 0x10a to 0x69"}, nil
				}
			}
			return doctor.Result{}, errors.New("unexpected")
		},
		OpenKVM:      func() error { return h.kvmErr },
		FreeBytes:    func(string) (uint64, error) { return 100 << 30, nil },
		PostgresDirs: func() []string { return []string{h.pg} },
		ProbeTimeout: time.Second,
	}
	return Deps{
		Doctor: dd, Out: out, Euid: euid, User: "anna",
		LookPath: func(name string) (string, error) {
			if name == "apt-get" && !h.hasApt {
				return "", exec.ErrNotFound
			}
			return "/usr/bin/" + name, nil
		},
		Run: func(_ context.Context, argv ...string) error {
			h.ran = append(h.ran, argv)
			if i := indexOf(argv, "install"); i >= 0 {
				for _, p := range argv[i+2:] {
					h.install(t, p)
				}
			}
			return nil
		},
	}, out
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// withImages registers stand-in images (a full golden image, with the
// desktop, and a runtime ISO) so only the rows setup fixes differ.
func withImages(t *testing.T, h home.Layout) {
	os.MkdirAll(h.Images(), 0o755)
	for _, kind := range []home.ImageKind{home.Golden, home.Runtime} {
		f := h.ImageFile(kind, "v1")
		os.WriteFile(f, []byte("x"), 0o644)
		desktop := ""
		if kind == home.Golden {
			desktop = `,"desktop":true`
		}
		os.WriteFile(h.ImageManifest(kind, "v1"), []byte(`{"kind":"`+string(kind)+`","version":"v1","file":"`+filepath.Base(f)+`","sha256":"2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881","size":1`+desktop+`}`), 0o644)
	}
}

func TestSetupInstallsWhatIsMissing(t *testing.T) {
	tests := map[string]struct {
		euid int
		want [][]string
	}{
		"as root without sudo": {0, [][]string{
			{"apt-get", "update"},
			{"apt-get", "install", "-y", "qemu-system-x86", "qemu-utils", "postgresql"},
		}},
		"as a user through sudo": {1000, [][]string{
			{"sudo", "apt-get", "update"},
			{"sudo", "apt-get", "install", "-y", "qemu-system-x86", "qemu-utils", "postgresql"},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			layout := home.Layout{Root: t.TempDir()}
			withImages(t, layout)
			h := newHost(t)
			d, out := h.deps(t, layout, tc.euid)
			rep, err := Run(context.Background(), d)
			if err != nil {
				t.Fatalf("Run() = %v\n%s", err, out)
			}
			if diff := cmp.Diff(tc.want, h.ran); diff != "" {
				t.Errorf("commands mismatch (-want +got):\n%s", diff)
			}
			if !rep.OK {
				t.Errorf("after setup the report is not ok:\n%s", doctor.Render(rep))
			}
		})
	}
}

func TestSetupOnlyWhatIsMissing(t *testing.T) {
	layout := home.Layout{Root: t.TempDir()}
	withImages(t, layout)
	h := newHost(t)
	h.install(t, "qemu-system-x86")
	h.install(t, "qemu-utils")
	d, _ := h.deps(t, layout, 0)
	if _, err := Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"apt-get", "update"}, {"apt-get", "install", "-y", "postgresql"}}
	if diff := cmp.Diff(want, h.ran); diff != "" {
		t.Errorf("commands mismatch (-want +got):\n%s", diff)
	}
	h.ran = nil
	if _, err := Run(context.Background(), d); err != nil || h.ran != nil {
		t.Errorf("second Run() = %v, ran %v; want nothing to do", err, h.ran)
	}
}

func TestSetupKVMGroupLine(t *testing.T) {
	layout := home.Layout{Root: t.TempDir()}
	withImages(t, layout)
	h := newHost(t)
	for _, p := range []string{"qemu-system-x86", "qemu-utils", "postgresql"} {
		h.install(t, p)
	}
	h.kvmErr = os.ErrPermission
	h.probe = map[string]int{}
	d, out := h.deps(t, layout, 1000)
	_, err := Run(context.Background(), d)
	if err == nil || !strings.Contains(err.Error(), "sudo usermod -aG kvm anna") {
		t.Errorf("Run() = %v; want the kvm group line for anna", err)
	}
	if !strings.Contains(out.String(), "sudo usermod -aG kvm anna") || !strings.Contains(out.String(), "log in again") {
		t.Errorf("output lacks the group line and the new-login note:\n%s", out)
	}
	if h.ran != nil {
		t.Errorf("setup ran %v; the group line is printed, not run", h.ran)
	}
}

func TestSetupRecordsCPUModel(t *testing.T) {
	layout := home.Layout{Root: t.TempDir()}
	withImages(t, layout)
	h := newHost(t)
	for _, p := range []string{"qemu-system-x86", "qemu-utils", "postgresql"} {
		h.install(t, p)
	}
	// Nested virtualization: the default model fails, the override runs.
	h.probe = map[string]int{hostconfig.CPUModel: 134, hostconfig.CPUModelNoArchCapabilities: 0}
	d, out := h.deps(t, layout, 0)
	rep, err := Run(context.Background(), d)
	if err != nil {
		t.Fatalf("Run() = %v\n%s", err, out)
	}
	cfg, err := hostconfig.Load(layout)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CPUModel != hostconfig.CPUModelNoArchCapabilities || !strings.Contains(cfg.CPUModelReason, "MSR 0x10a") {
		t.Errorf("host.yaml = %+v; want the override recorded with the probe's error", cfg)
	}
	if !rep.OK {
		t.Errorf("after recording, the report is not ok:\n%s", doctor.Render(rep))
	}
}

func TestSetupWithoutApt(t *testing.T) {
	layout := home.Layout{Root: t.TempDir()}
	withImages(t, layout)
	h := newHost(t)
	h.hasApt = false
	d, out := h.deps(t, layout, 0)
	if _, err := Run(context.Background(), d); err == nil {
		t.Error("Run() without apt-get: want an error")
	}
	if !strings.Contains(out.String(), "dnf") || !strings.Contains(out.String(), "pacman") || h.ran != nil {
		t.Errorf("without apt-get, setup must print the dnf/pacman lines and run nothing; ran %v\n%s", h.ran, out)
	}
}
