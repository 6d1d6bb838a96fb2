package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// machine is a fake host: which programs exist, what they answer.
type machine struct {
	version   string            // qemu --version output
	probe     map[string]Result // by CPU model
	kvmErr    error
	free      uint64
	pgDir     string
	noQEMU    bool
	noQEMUImg bool
	probes    []string
}

func (m *machine) deps(t *testing.T, h home.Layout) Deps {
	t.Helper()
	bin := t.TempDir()
	mk := func(name string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if !m.noQEMU {
		mk("qemu-system-x86_64")
	}
	if !m.noQEMUImg {
		mk("qemu-img")
	}
	env := map[string]string{"PATH": bin}
	return Deps{
		Home:   h,
		Getenv: func(k string) string { return env[k] },
		Run: func(_ context.Context, _ time.Duration, argv ...string) (Result, error) {
			if len(argv) == 2 && argv[1] == "--version" {
				return Result{Output: m.version}, nil
			}
			for i, a := range argv {
				if a == "-cpu" {
					m.probes = append(m.probes, argv[i+1])
					if r, ok := m.probe[argv[i+1]]; ok {
						return r, nil
					}
					return Result{ExitCode: 1, Output: "unexpected model " + argv[i+1]}, nil
				}
			}
			return Result{}, errors.New("unexpected command " + strings.Join(argv, " "))
		},
		OpenKVM:      func() error { return m.kvmErr },
		FreeBytes:    func(string) (uint64, error) { return m.free, nil },
		PostgresDirs: func() []string { return []string{m.pgDir} },
		ProbeTimeout: time.Second,
	}
}

func goodMachine(t *testing.T) *machine {
	pg := t.TempDir()
	for _, p := range []string{"postgres", "initdb"} {
		os.WriteFile(filepath.Join(pg, p), []byte("#!/bin/sh\n"), 0o755)
	}
	return &machine{
		version: "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\n",
		probe:   map[string]Result{hostconfig.CPUModel: {}, hostconfig.CPUModelTCG: {}},
		free:    100 << 30,
		pgDir:   pg,
	}
}

// registerImages registers a full golden image (with the desktop) and a
// runtime ISO, as image build leaves a home.
func registerImages(t *testing.T, h home.Layout) {
	t.Helper()
	registerImage(t, h, home.Golden, goldenVersion, true)
	registerImage(t, h, home.Runtime, goldenVersion, false)
}

const (
	goldenVersion = "20261130T000000Z-abc"
	// testVersion is newer: the test image registered after image build.
	testVersion = "20261201T000000Z-def"
)

func registerImage(t *testing.T, h home.Layout, kind home.ImageKind, version string, desktop bool) {
	t.Helper()
	os.MkdirAll(h.Images(), 0o755)
	f := h.ImageFile(kind, version)
	os.WriteFile(f, []byte(string(kind)+version), 0o644)
	sum, size, _ := artifact.FileSHA256(f)
	b, _ := json.Marshal(protocol.ImageManifest{Kind: string(kind), Version: version, File: filepath.Base(f), SHA256: sum, Size: size, Desktop: desktop})
	os.WriteFile(h.ImageManifest(kind, version), b, 0o644)
}

func statuses(r Report) map[string]Status {
	out := map[string]Status{}
	for _, c := range r.Checks {
		out[c.Name] = c.Status
	}
	return out
}

// doctorCase is a host the doctor is run on, and what it should say.
type doctorCase struct {
	reason string
	setup  func(t *testing.T, m *machine, h *home.Layout)
	want   map[string]Status
	ok     bool
	fixHas map[string]string // row -> substring of its fix
}

// doctorCases are TestDoctor's hosts; TestFixLinesAreCommands runs them too.
func doctorCases() map[string]doctorCase {
	allOK := map[string]Status{RowQEMU: OK, RowQEMUImg: OK, RowAccelerator: OK, RowCPUModel: OK, RowHome: OK, RowGolden: OK, RowRuntime: OK, RowPostgres: OK}
	with := func(changes map[string]Status) map[string]Status {
		out := map[string]Status{}
		for k, v := range allOK {
			out[k] = v
		}
		for k, v := range changes {
			out[k] = v
		}
		return out
	}
	return map[string]doctorCase{
		"healthy kvm host": {reason: "everything in place", want: allOK, ok: true},
		"qemu too old": {
			reason: "QEMU 7.1 is under the 7.2 minimum",
			setup:  func(t *testing.T, m *machine, h *home.Layout) { m.version = "QEMU emulator version 7.1.0" },
			want:   with(map[string]Status{RowQEMU: Failed, RowAccelerator: Failed}), fixHas: map[string]string{RowQEMU: "apt-get install -y qemu-system-x86"},
		},
		"no qemu": {
			reason: "nothing installed",
			setup:  func(t *testing.T, m *machine, h *home.Layout) { m.noQEMU, m.noQEMUImg = true, true },
			want:   with(map[string]Status{RowQEMU: Missing, RowQEMUImg: Missing, RowAccelerator: Failed}),
			fixHas: map[string]string{RowQEMU: "qemu-system-x86", RowQEMUImg: "qemu-utils"},
		},
		"kvm not accessible": {
			reason: "/dev/kvm denied and the probe fails: the group line",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				m.kvmErr = os.ErrPermission
				m.probe[hostconfig.CPUModel] = Result{ExitCode: 1, Output: "Could not access KVM kernel module: Permission denied"}
			},
			want: with(map[string]Status{RowAccelerator: Missing}), fixHas: map[string]string{RowAccelerator: "usermod -aG kvm"},
		},
		"probe has the last word": {
			reason: "/dev/kvm check fails but QEMU runs with kvm: ok",
			setup:  func(t *testing.T, m *machine, h *home.Layout) { m.kvmErr = os.ErrPermission },
			want:   allOK, ok: true,
		},
		"nested virtualization": {
			reason: "the default model fails with MSR 0x10a, the recorded override runs",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				m.probe[hostconfig.CPUModel] = Result{ExitCode: 134, Output: "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69"}
				m.probe[hostconfig.CPUModelNoArchCapabilities] = Result{}
			},
			want:   with(map[string]Status{RowAccelerator: Failed, RowCPUModel: Failed}),
			fixHas: map[string]string{RowAccelerator: "invisible-dots setup", RowCPUModel: "invisible-dots setup"},
		},
		"override recorded": {
			reason: "setup recorded the override; the probe runs it",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				m.probe = map[string]Result{hostconfig.CPUModelNoArchCapabilities: {}}
				hostconfig.Save(*h, hostconfig.Config{CPUModel: hostconfig.CPUModelNoArchCapabilities, CPUModelReason: "failed to set MSR 0x10a"})
			},
			want: allOK, ok: true,
		},
		"vcpu hangs": {
			reason: "a probe still running at its timeout is a virtual CPU that does not run",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				m.probe[hostconfig.CPUModel] = Result{TimedOut: true, ExitCode: -1}
			},
			want: with(map[string]Status{RowAccelerator: Failed}), fixHas: map[string]string{RowAccelerator: "grep -E 'kvm"},
		},
		"tcg": {
			reason: "accelerator: tcg is always a warning, not a failure",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				hostconfig.Save(*h, hostconfig.Config{Accelerator: hostconfig.TCG})
			},
			want: with(map[string]Status{RowAccelerator: Warning}), ok: true, fixHas: map[string]string{RowAccelerator: "/^accelerator:/d"},
		},
		"comma in home": {
			reason: "a home QEMU cannot be given",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				old := h.Root
				h.Root = filepath.Join(old, "a,b")
				os.MkdirAll(h.Root, 0o700)
				registerImages(t, *h)
			},
			want: with(map[string]Status{RowHome: Failed}), fixHas: map[string]string{RowHome: home.EnvHome},
		},
		"disk full": {
			reason: "under 2 GiB free",
			setup:  func(t *testing.T, m *machine, h *home.Layout) { m.free = 1 << 20 },
			want:   with(map[string]Status{RowHome: Failed}), fixHas: map[string]string{RowHome: "df -h "},
		},
		"no images": {
			reason: "a fresh home",
			setup:  func(t *testing.T, m *machine, h *home.Layout) { os.RemoveAll(h.Images()) },
			want:   with(map[string]Status{RowGolden: Missing, RowRuntime: Missing}),
			fixHas: map[string]string{RowGolden: "invisible-dots image build", RowRuntime: "invisible-dots image build"},
		},
		"test image only": {
			reason: "make test-image registers a golden image without the desktop: a Dot on it has no desktop, so the row is missing",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				os.RemoveAll(h.Images())
				registerImage(t, *h, home.Golden, testVersion, false)
				registerImage(t, *h, home.Runtime, testVersion, false)
			},
			want: with(map[string]Status{RowGolden: Missing}), fixHas: map[string]string{RowGolden: "invisible-dots image build"},
		},
		"test image newer than the golden image": {
			reason: "the row looks for the newest golden image with the desktop, not the newest golden image",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				registerImage(t, *h, home.Golden, testVersion, false)
			},
			want: allOK, ok: true,
		},
		"tampered image": {
			reason: "the golden image changed after it was registered",
			setup: func(t *testing.T, m *machine, h *home.Layout) {
				os.WriteFile(h.Golden(goldenVersion), []byte("changed"), 0o644)
			},
			want: with(map[string]Status{RowGolden: Failed}), fixHas: map[string]string{RowGolden: "invisible-dots image build"},
		},
		"no postgres": {
			reason: "no server binaries",
			setup:  func(t *testing.T, m *machine, h *home.Layout) { m.pgDir = t.TempDir() },
			want:   with(map[string]Status{RowPostgres: Missing}), fixHas: map[string]string{RowPostgres: "apt-get install -y postgresql"},
		},
	}
}

func TestDoctor(t *testing.T) {
	for name, tc := range doctorCases() {
		t.Run(name, func(t *testing.T) {
			h := home.Layout{Root: t.TempDir()}
			registerImages(t, h)
			m := goodMachine(t)
			if tc.setup != nil {
				tc.setup(t, m, &h)
			}
			rep := Run(context.Background(), m.deps(t, h))
			if diff := cmp.Diff(tc.want, statuses(rep)); diff != "" {
				t.Errorf("%s: statuses mismatch (-want +got):\n%s\n%s", tc.reason, diff, Render(rep))
			}
			if rep.OK != tc.ok {
				t.Errorf("%s: OK = %v, want %v", tc.reason, rep.OK, tc.ok)
			}
			// Ref 11.1: exit 0 only when every row is ok; a warning alone
			// is its own code, so a script gating on it stops there too.
			wantExit := ExitReady
			for _, st := range tc.want {
				if st != OK {
					wantExit = ExitWarnings
				}
			}
			if !tc.ok {
				wantExit = ExitNotOK
			}
			if rep.ExitCode != wantExit || rep.Ready != (wantExit == ExitReady) {
				t.Errorf("%s: exit code %d, ready %v; want %d", tc.reason, rep.ExitCode, rep.Ready, wantExit)
			}
			// Every row not ok has a fix: a command to paste, its words beside it.
			checkFixes(t, tc.reason, rep)
			for row, sub := range tc.fixHas {
				if c, _ := rep.Row(row); !strings.Contains(c.Fix, sub) {
					t.Errorf("%s: fix of %q = %q, want it to name %q", tc.reason, row, c.Fix, sub)
				}
			}
		})
	}
}

func TestDoctorOrderAndJSON(t *testing.T) {
	h := home.Layout{Root: t.TempDir()}
	registerImages(t, h)
	m := goodMachine(t)
	rep := Run(context.Background(), m.deps(t, h))
	var names []string
	for _, c := range rep.Checks {
		names = append(names, c.Name)
	}
	want := []string{RowQEMU, RowQEMUImg, RowAccelerator, RowCPUModel, RowHome, RowGolden, RowRuntime, RowPostgres}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("row order mismatch (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(b), `"status":"ok"`) || !strings.Contains(string(b), `"checks"`) {
		t.Errorf("JSON = %s, %v", b, err)
	}
	probe := ProbeArgs("/usr/bin/qemu-system-x86_64", "kvm", hostconfig.CPUModel)
	wantProbe := []string{"/usr/bin/qemu-system-x86_64", "-nodefaults", "-no-user-config", "-machine", "q35", "-accel", "kvm", "-cpu", "host,-vmx,-svm", "-display", "none", "-no-reboot", "-boot", "reboot-timeout=0"}
	if diff := cmp.Diff(wantProbe, probe); diff != "" {
		t.Errorf("ProbeArgs mismatch (-want +got):\n%s", diff)
	}
}

// TestRealProbe runs the real probe under tcg when QEMU is installed: exit 0
// means QEMU ran the firmware with that CPU model.
func TestRealProbe(t *testing.T) {
	d := Real(home.Layout{Root: t.TempDir()})
	bin := "/usr/bin/qemu-system-x86_64"
	if _, err := os.Stat(bin); err != nil {
		t.Skip("QEMU is not installed")
	}
	if err := Probe(context.Background(), d, bin, hostconfig.TCG, hostconfig.CPUModelTCG); err != nil {
		t.Errorf("tcg probe = %v, want success", err)
	}
	if err := Probe(context.Background(), d, bin, hostconfig.TCG, hostconfig.CPUModel); err == nil || !strings.Contains(err.Error(), "requires KVM") {
		t.Errorf("tcg probe with the host model = %v, want QEMU's refusal", err)
	}
}

func TestOpenRouterKeyRow(t *testing.T) {
	tests := map[string]struct {
		reason  string
		stored  bool
		err     error
		want    Status
		wantFix string
	}{
		"stored":      {"the default key's Secret exists and holds a key", true, nil, OK, ""},
		"missing":     {"no default key: the fix is the command that stores one", false, nil, Missing, "invisible-dots secret openrouter"},
		"not checked": {"no server to ask is not the host's failure: a warning naming the server", false, fmt.Errorf("%w: no kubeconfig", ErrNotChecked), Warning, "invisible-dots server"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := home.Layout{Root: t.TempDir()}
			registerImages(t, h)
			d := goodMachine(t).deps(t, h)
			d.OpenRouterKey = func(context.Context) (bool, error) { return tc.stored, tc.err }
			rep := Run(context.Background(), d)
			row, ok := rep.Row(RowOpenRouterKey)
			if !ok {
				t.Fatalf("%s\nno %q row", tc.reason, RowOpenRouterKey)
			}
			if row.Status != tc.want || !strings.Contains(row.Fix, tc.wantFix) {
				t.Errorf("%s\nrow = %+v, want %s with fix %q", tc.reason, row, tc.want, tc.wantFix)
			}
			checkFixes(t, tc.reason, rep)
			if last := rep.Checks[len(rep.Checks)-1].Name; last != RowOpenRouterKey {
				t.Errorf("%s\nthe last row is %q, want the key's (ref 11.1's order)", tc.reason, last)
			}
			if wantOK := tc.want != Missing; rep.OK != wantOK {
				t.Errorf("%s\nreport OK = %v, want %v", tc.reason, rep.OK, wantOK)
			}
		})
	}
}

// TestKeyStoredWithoutAServer: before the server first ran there is no
// kubeconfig, and the row is not checked rather than failed.
func TestKeyStoredWithoutAServer(t *testing.T) {
	_, err := keyStored(home.Layout{Root: t.TempDir()})(context.Background())
	if !errors.Is(err, ErrNotChecked) || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("keyStored() = %v, want ErrNotChecked naming the missing kubeconfig", err)
	}
}
