package qemu

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

const testToken = "0123456789abcdef0123456789abcdef"

func TestQEMUArgs(t *testing.T) {
	m := machine{
		Binary: "/usr/bin/qemu-system-x86_64", Name: "invisible-dot-team-a.helper",
		Accelerator: "kvm", CPUModel: hostconfig.CPUModel, CPUs: 2, MemoryMiB: 4096,
		Disk: "/h/vms/team-a/helper/disk.qcow2", Seed: "/h/vms/team-a/helper/seed.iso",
		Runtime: "/h/images/runtime-v1.iso", GuestPort: 40123, SerialLog: "/h/vms/team-a/helper/serial.log",
	}
	want := []string{
		"/usr/bin/qemu-system-x86_64",
		"-name", "invisible-dot-team-a.helper",
		"-machine", "q35",
		"-accel", "kvm",
		"-cpu", "host,-vmx,-svm",
		"-smp", "2",
		"-m", "4096",
		"-drive", "if=virtio,file=/h/vms/team-a/helper/disk.qcow2,format=qcow2,discard=unmap",
		"-drive", "if=virtio,file=/h/vms/team-a/helper/seed.iso,format=raw,readonly=on",
		"-drive", "if=virtio,file=/h/images/runtime-v1.iso,format=raw,readonly=on",
		"-netdev", "user,id=net0,hostfwd=tcp:127.0.0.1:40123-:1024",
		"-device", "virtio-net-pci,netdev=net0",
		"-device", "virtio-rng-pci",
		"-serial", "file:/h/vms/team-a/helper/serial.log",
		"-display", "none",
	}
	got := qemuArgs(m)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("qemuArgs() mismatch (-want +got):\n%s", diff)
	}
	if f := hasForbiddenFlag(got); f != "" {
		t.Errorf("qemuArgs() holds the forbidden flag %s", f)
	}

	m.Kernel, m.Initrd, m.Append = "/h/images/k", "/h/images/i", "console=ttyS0 quiet"
	direct := qemuArgs(m)
	if diff := cmp.Diff(append(want, "-kernel", "/h/images/k", "-initrd", "/h/images/i", "-append", "console=ttyS0 quiet"), direct); diff != "" {
		t.Errorf("qemuArgs() with direct boot mismatch (-want +got):\n%s", diff)
	}
	if f := hasForbiddenFlag(direct); f != "" {
		t.Errorf("qemuArgs() with direct boot holds the forbidden flag %s", f)
	}
}

// TestForbiddenFlagsAreCaught keeps the guard itself honest: each flag of
// ref 3.4's list, added to a good argv, is found.
func TestForbiddenFlagsAreCaught(t *testing.T) {
	for _, f := range []string{"-monitor", "-qmp", "-S", "-no-shutdown", "--qmp", "-monitor=stdio"} {
		args := append(qemuArgs(machine{Binary: "/q", Accelerator: "tcg", CPUModel: "max", CPUs: 1, MemoryMiB: 128}), f)
		if got := hasForbiddenFlag(args); got != f {
			t.Errorf("hasForbiddenFlag(argv + %q) = %q, want it caught", f, got)
		}
	}
}

func TestSeedISOReadBack(t *testing.T) {
	dir := t.TempDir()
	id := home.VMID{Namespace: "team-a", Name: "helper"}
	cfg := protocol.GuestConfig{DotID: "team-a/helper", Token: testToken, Hostname: "helper"}
	dest := filepath.Join(dir, "seed.iso")
	env := protocol.EngineEnv{OpenRouterURL: "http://10.0.2.2:8999/api/v1"}
	iid, err := writeSeed(dest, id, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("seed.iso mode = %v, want 0600 (it holds the token)", fi.Mode().Perm())
	}
	label, files, err := isofs.Read(dest)
	if err != nil {
		t.Fatal(err)
	}
	if label != protocol.SeedVolumeLabel {
		t.Errorf("seed label = %q, want %q", label, protocol.SeedVolumeLabel)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	if diff := cmp.Diff([]string{protocol.SeedEngineEnvFile, protocol.SeedGuestConfigFile, protocol.SeedMetaDataFile, protocol.SeedSudoersFile, protocol.SeedUserDataFile}, names, sortStrings()); diff != "" {
		t.Errorf("seed files mismatch (-want +got):\n%s", diff)
	}
	var back protocol.GuestConfig
	if err := json.Unmarshal(files[protocol.SeedGuestConfigFile], &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cfg, back); diff != "" {
		t.Errorf("guest config read back mismatch (-want +got):\n%s", diff)
	}
	meta := string(files[protocol.SeedMetaDataFile])
	if !strings.HasPrefix(iid, "iid-team-a.helper-") || !strings.Contains(meta, "instance-id: "+iid+"\n") || !strings.Contains(meta, "local-hostname: helper\n") {
		t.Errorf("meta-data = %q, instance id %q", meta, iid)
	}
	ud := string(files[protocol.SeedUserDataFile])
	if !strings.HasPrefix(ud, "#cloud-config\n") || !strings.Contains(ud, protocol.GuestConfigPath) || strings.Contains(ud, testToken) {
		t.Errorf("user-data must be #cloud-config writing %s with the token base64-encoded, got %q", protocol.GuestConfigPath, ud)
	}

	// The engine's environment: the host's OpenRouter URL, in the seed and
	// written by cloud-init where the engine's unit reads it.
	vars, err := protocol.ParseEngineEnv(files[protocol.SeedEngineEnvFile])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{protocol.EnvOpenRouterURL + "=http://10.0.2.2:8999/api/v1"}, vars); diff != "" {
		t.Errorf("engine environment mismatch (-want +got):\n%s", diff)
	}
	if !strings.Contains(ud, protocol.EngineEnvPath) {
		t.Errorf("user-data does not write %s: %q", protocol.EngineEnvPath, ud)
	}

	// Same content, same instance id; another token or URL, another one.
	again, _ := writeSeed(dest, id, cfg, env)
	otherURL, _ := writeSeed(dest, id, cfg, protocol.EngineEnv{OpenRouterURL: "https://openrouter.ai/api/v1"})
	cfg.Token = strings.Repeat("z", 32)
	other, _ := writeSeed(dest, id, cfg, env)
	if again != iid || other == iid || otherURL == iid {
		t.Errorf("instance ids: first %q, same content %q, new token %q, new URL %q; want equal, then different", iid, again, other, otherURL)
	}
	if _, err := writeSeed(dest, id, protocol.GuestConfig{DotID: "x", Token: "short"}, env); err == nil {
		t.Error("writeSeed() with a short token: want an error")
	}
	if _, err := writeSeed(dest, id, cfg, protocol.EngineEnv{OpenRouterURL: "file:///etc/passwd"}); err == nil {
		t.Error("writeSeed() with a file URL for OpenRouter: want an error")
	}
}

func sortStrings() cmp.Option {
	return cmp.Transformer("sort", func(in []string) []string {
		out := append([]string(nil), in...)
		for i := range out {
			for j := i + 1; j < len(out); j++ {
				if out[j] < out[i] {
					out[i], out[j] = out[j], out[i]
				}
			}
		}
		return out
	})
}

func TestFindBinaries(t *testing.T) {
	dir := t.TempDir()
	mk := func(p string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	full := filepath.Join(dir, "full")
	onlySystem := filepath.Join(dir, "only-system")
	mk(filepath.Join(full, SystemBinary))
	mk(filepath.Join(full, ImgBinary))
	mk(filepath.Join(onlySystem, SystemBinary))

	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	tests := map[string]struct {
		reason string
		env    map[string]string
		want   Binaries
		err    bool
	}{
		"qemu dir": {"INVISIBLE_DOTS_QEMU_DIR wins over PATH", map[string]string{home.EnvQEMUDir: full, "PATH": onlySystem},
			Binaries{Dir: full, System: filepath.Join(full, SystemBinary), Img: filepath.Join(full, ImgBinary)}, false},
		"qemu dir alone": {"no qemu-img from PATH mixed with a QEMU from the dir", map[string]string{home.EnvQEMUDir: onlySystem, "PATH": full}, Binaries{}, true},
		"path": {"first on PATH", map[string]string{"PATH": onlySystem + ":" + full},
			Binaries{System: filepath.Join(onlySystem, SystemBinary), Img: filepath.Join(full, ImgBinary)}, false},
		"relative path entry": {"a relative PATH entry is never searched", map[string]string{"PATH": "full"}, Binaries{}, true},
		"missing":             {"nothing installed", map[string]string{"PATH": dir}, Binaries{}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.env["PATH"] == "full" {
				wd, _ := os.Getwd()
				os.Chdir(dir)
				defer os.Chdir(wd)
			}
			got, err := FindBinaries(env(tc.env))
			if tc.err {
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("%s: FindBinaries() = %+v, %v; want ErrNotFound", tc.reason, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: FindBinaries() = %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: mismatch (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	tests := map[string]hostconfig.Version{
		"QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright": {Major: 7, Minor: 2, Patch: 22},
		"QEMU emulator version 8.2.2 (Debian 1:8.2.2+ds-0ubuntu1)":                  {Major: 8, Minor: 2, Patch: 2},
		"qemu-img version 10.0.0":   {Major: 10, Minor: 0, Patch: 0},
		"QEMU emulator version 9.1": {Major: 9, Minor: 1, Patch: 0},
	}
	for in, want := range tests {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseVersion("hello"); err == nil {
		t.Error("ParseVersion(hello): want an error")
	}
}

func TestAllowlistedEnvironment(t *testing.T) {
	in := []string{"PATH=/usr/bin", "HOME=/root", "INVISIBLE_DOTS_TOKEN=secret", "DATABASE_URL=postgres://u:p@h/db",
		"OPENROUTER_API_KEY=sk-x", "LC_ALL=C.UTF-8", "LANG=C", "KUBECONFIG=/k", "weird"}
	want := []string{"PATH=/usr/bin", "HOME=/root", "LC_ALL=C.UTF-8", "LANG=C"}
	if diff := cmp.Diff(want, allowlistedEnvironment(in)); diff != "" {
		t.Errorf("allowlistedEnvironment() mismatch (-want +got):\n%s", diff)
	}
}

func TestRecordRoundTripAndRefusals(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "qemu.json")
	if _, err := readRecord(p); !errors.Is(err, errNoRecord) {
		t.Fatalf("readRecord() of a missing file = %v, want errNoRecord", err)
	}
	rec := record{PID: 42, GuestPort: 40000, ProcStartTicks: 7, QEMU: "/usr/bin/qemu-system-x86_64", GoldenImage: "g", RuntimeImage: "r"}
	rec.BootID, rec.HostUptimeS = "b", 12.5
	if err := writeRecord(p, rec); err != nil {
		t.Fatal(err)
	}
	got, err := readRecord(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rec, got); diff != "" {
		t.Errorf("record round trip mismatch (-want +got):\n%s", diff)
	}
	raw, _ := os.ReadFile(p)
	for _, field := range []string{`"pid"`, `"guest_port"`, `"host_uptime_s"`, `"boot_id"`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("qemu.json lacks %s: %s", field, raw)
		}
	}
	for name, body := range map[string]string{
		"truncated": `{"pid": 4`,
		"no pid":    `{"guest_port": 4000}`,
		"bad port":  `{"pid": 4, "guest_port": 70000}`,
	} {
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := readRecord(p); err == nil || errors.Is(err, errNoRecord) {
			t.Errorf("%s: readRecord(%q) = %v, want a parse error", name, body, err)
		}
	}
}
