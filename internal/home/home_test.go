package home

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestQEMUPathProblem(t *testing.T) {
	tests := map[string]struct {
		path    string
		problem string // substring of the error, "" for none
	}{
		"plain":        {"/home/anna/.invisible-dots/vms/default/helper/disk.qcow2", ""},
		"spaces ok":    {"/home/anna maria/.invisible-dots", ""},
		"comma":        {"/home/a,b/.invisible-dots", "comma"},
		"accented":     {"/home/josé/.invisible-dots", "non-ASCII"},
		"cyrillic":     {"/home/анна/.invisible-dots", "non-ASCII"},
		"invalid utf8": {"/home/\xff/.invisible-dots", "UTF-8"},
		"newline":      {"/home/a\nb", "control"},
		"delete char":  {"/home/a\x7fb", "non-ASCII"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := QEMUPathProblem(tc.path)
			switch {
			case tc.problem == "" && err != nil:
				t.Errorf("QEMUPathProblem(%q) = %v, want nil", tc.path, err)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Errorf("QEMUPathProblem(%q) = %v, want an error about %q", tc.path, err, tc.problem)
			case err != nil && !strings.Contains(err.Error(), EnvHome):
				t.Errorf("QEMUPathProblem(%q) = %v, want the fix to name %s", tc.path, err, EnvHome)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvHome, "/srv/dots")
	h, err := FromEnv()
	if err != nil || h.Root != "/srv/dots" {
		t.Errorf("FromEnv() with %s=/srv/dots = %+v, %v", EnvHome, h, err)
	}
	t.Setenv(EnvHome, "")
	t.Setenv("HOME", "/home/anna")
	h, err = FromEnv()
	if err != nil || h.Root != "/home/anna/.invisible-dots" {
		t.Errorf("FromEnv() default = %+v, %v; want /home/anna/.invisible-dots", h, err)
	}
}

func TestLayout(t *testing.T) {
	h := Layout{Root: "/h"}
	a := h.VM(VMID{Namespace: "team-a", Name: "helper"})
	b := h.VM(VMID{Namespace: "team-b", Name: "helper"})
	got := map[string]string{
		"host.yaml":    h.HostConfig(),
		"api.token":    h.APIToken(),
		"master.key":   h.MasterKey(),
		"db":           h.DB(),
		"server.lock":  h.ServerLock(),
		"takeover":     Takeover(h.ServerLock()),
		"pki":          h.PKI(),
		"kubeconfig":   h.Kubeconfig(),
		"run":          h.Run(),
		"golden":       h.Golden("20261130T120000Z-abc"),
		"golden.json":  h.GoldenManifest("20261130T120000Z-abc"),
		"kernel":       h.GoldenKernel("20261130T120000Z-abc"),
		"initrd":       h.GoldenInitrd("20261130T120000Z-abc"),
		"runtime":      h.Runtime("v1"),
		"runtime.json": h.RuntimeManifest("v1"),
		"cache":        h.ImagesCache(),
		"disk":         a.Disk(),
		"seed":         a.Seed(),
		"qemu.json":    a.QEMUJSON(),
		"serial":       a.SerialLog(),
		"qemu log a":   a.QEMULog(),
		"qemu log b":   b.QEMULog(),
		"name a":       a.QEMUName(),
	}
	want := map[string]string{
		"host.yaml":    "/h/config/host.yaml",
		"api.token":    "/h/config/api.token",
		"master.key":   "/h/config/master.key",
		"db":           "/h/db",
		"server.lock":  "/h/server.lock",
		"takeover":     "/h/server.lock.takeover",
		"pki":          "/h/pki",
		"kubeconfig":   "/h/kubeconfig",
		"run":          "/h/run",
		"golden":       "/h/images/golden-20261130T120000Z-abc.qcow2",
		"golden.json":  "/h/images/golden-20261130T120000Z-abc.json",
		"kernel":       "/h/images/golden-20261130T120000Z-abc.vmlinuz",
		"initrd":       "/h/images/golden-20261130T120000Z-abc.initrd",
		"runtime":      "/h/images/runtime-v1.iso",
		"runtime.json": "/h/images/runtime-v1.json",
		"cache":        "/h/images/.cache",
		"disk":         "/h/vms/team-a/helper/disk.qcow2",
		"seed":         "/h/vms/team-a/helper/seed.iso",
		"qemu.json":    "/h/vms/team-a/helper/qemu.json",
		"serial":       "/h/vms/team-a/helper/serial.log",
		"qemu log a":   "/h/logs/qemu-team-a.helper.log",
		"qemu log b":   "/h/logs/qemu-team-b.helper.log",
		"name a":       "invisible-dot-team-a.helper",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layout mismatch (-want +got):\n%s", diff)
	}
}

func TestVMIDValidate(t *testing.T) {
	tests := map[string]struct {
		id VMID
		ok bool
	}{
		"plain":          {VMID{"default", "helper"}, true},
		"digits":         {VMID{"ns1", "a-1"}, true},
		"traversal":      {VMID{"default", ".."}, false},
		"slash":          {VMID{"default", "a/b"}, false},
		"dot":            {VMID{"default", "a.b"}, false},
		"upper":          {VMID{"Default", "a"}, false},
		"empty ns":       {VMID{"", "a"}, false},
		"leading hyphen": {VMID{"default", "-a"}, false},
		"too long":       {VMID{"default", strings.Repeat("a", 64)}, false},
		"max length":     {VMID{"default", strings.Repeat("a", 63)}, true},
		"comma":          {VMID{"default", "a,b"}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := tc.id.Validate(); (err == nil) != tc.ok {
				t.Errorf("%+v.Validate() = %v, want ok=%v", tc.id, err, tc.ok)
			}
		})
	}
}

func TestParseImageFile(t *testing.T) {
	tests := map[string]struct {
		kind    ImageKind
		version string
		ok      bool
	}{
		"golden-20261130-abc.qcow2": {Golden, "20261130-abc", true},
		"runtime-20261130-abc.iso":  {Runtime, "20261130-abc", true},
		"golden-20261130-abc.json":  {"", "", false},
		"golden-.qcow2":             {"", "", false},
		"other.iso":                 {"", "", false},
		"runtime-a,b.iso":           {"", "", false},
	}
	for base, tc := range tests {
		kind, version, ok := ParseImageFile(base)
		if kind != tc.kind || version != tc.version || ok != tc.ok {
			t.Errorf("ParseImageFile(%q) = %q, %q, %v; want %q, %q, %v", base, kind, version, ok, tc.kind, tc.version, tc.ok)
		}
	}
}

func TestEnsure(t *testing.T) {
	h := Layout{Root: filepath.Join(t.TempDir(), "home")}
	if err := os.MkdirAll(h.Config(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.APIToken(), []byte("t"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{h.Root, h.Config(), h.Run(), h.Images(), h.VMs(), h.Logs(), h.APIToken()} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		want := PrivateDirMode
		if !fi.IsDir() {
			want = PrivateFileMode
		}
		if fi.Mode().Perm() != want && (p == h.Root || p == h.Config() || p == h.Run() || p == h.APIToken()) {
			t.Errorf("%s mode = %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
}
