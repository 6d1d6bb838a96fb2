package images

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// register writes an image file and its manifest the way a builder does.
func register(t *testing.T, h home.Layout, kind home.ImageKind, version, content string) Image {
	t.Helper()
	os.MkdirAll(h.Images(), 0o755)
	file := h.ImageFile(kind, version)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, size, err := artifact.FileSHA256(file)
	if err != nil {
		t.Fatal(err)
	}
	m := protocol.ImageManifest{Kind: string(kind), Version: version, File: filepath.Base(file), SHA256: sum, Size: size, Created: time.Now().UTC().Format(time.RFC3339)}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(h.ImageManifest(kind, version), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return Image{Kind: kind, Version: version, File: file, ManifestPath: h.ImageManifest(kind, version)}
}

func TestListLatestVerify(t *testing.T) {
	h := home.Layout{Root: t.TempDir()}
	if _, err := Latest(h, home.Golden); !errors.Is(err, ErrNoImage) {
		t.Fatalf("Latest() on an empty home = %v, want ErrNoImage", err)
	}
	register(t, h, home.Golden, "20261101T000000Z-aaa", "old")
	newest := register(t, h, home.Golden, "20261130T000000Z-bbb", "new")
	register(t, h, home.Runtime, "20261201T000000Z-ccc", "iso")
	// A file without a manifest is not registered.
	os.WriteFile(h.Golden("20261231T000000Z-zzz"), []byte("x"), 0o644)

	got, err := Latest(h, home.Golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(newest, got); diff != "" {
		t.Errorf("Latest(golden) mismatch (-want +got):\n%s", diff)
	}
	if _, err := got.Verify(); err != nil {
		t.Errorf("Verify() of an unchanged image = %v", err)
	}
	os.WriteFile(got.File, []byte("tampered"), 0o644)
	if _, err := got.Verify(); err == nil || !strings.Contains(err.Error(), "changed after it was registered") {
		t.Errorf("Verify() of a changed image = %v, want a digest mismatch", err)
	}
	if _, err := Get(h, home.Runtime, "nope"); !errors.Is(err, ErrNoImage) {
		t.Errorf("Get() of a missing version = %v, want ErrNoImage", err)
	}
	if _, err := Get(h, home.Runtime, "../x"); err == nil {
		t.Error("Get() of a version with a path in it: want an error")
	}
}

// built writes a golden image with a kernel and an initramfs into a folder the
// way a builder does (guest/image/artifact) and returns its manifest's path.
func built(t *testing.T, version string) (string, protocol.ImageManifest) {
	t.Helper()
	out := t.TempDir()
	files := map[string]string{"disk.qcow2": "disk " + version, "vmlinuz": "kernel", "initrd": "initramfs"}
	sums := map[string]string{}
	for name, content := range files {
		p := filepath.Join(out, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		sums[name], _, _ = artifact.FileSHA256(p)
	}
	m := protocol.ImageManifest{
		Kind: protocol.ImageKindGolden, Version: version, File: "disk.qcow2", SHA256: sums["disk.qcow2"], Size: int64(len(files["disk.qcow2"])),
		Created: "2026-11-30T12:00:00Z",
		Boot:    &protocol.DirectBoot{Kernel: "vmlinuz", KernelSHA256: sums["vmlinuz"], Initrd: "initrd", InitrdSHA256: sums["initrd"], Append: "console=ttyS0"},
	}
	path := filepath.Join(out, "golden.json")
	if err := artifact.WriteManifest(path, m); err != nil {
		t.Fatal(err)
	}
	return path, m
}

func TestRegister(t *testing.T) {
	h := home.Layout{Root: t.TempDir()}
	const version = "20261130T120000Z-0123456789abcdef"
	path, m := built(t, version)
	img, err := Register(h, path)
	if err != nil {
		t.Fatal(err)
	}
	want := Image{Kind: home.Golden, Version: version, File: h.Golden(version), ManifestPath: h.GoldenManifest(version)}
	if diff := cmp.Diff(want, img); diff != "" {
		t.Fatalf("Register() mismatch (-want +got):\n%s", diff)
	}
	got, err := img.Verify()
	if err != nil {
		t.Fatalf("the registered image does not verify: %v", err)
	}
	wantManifest := m
	wantBoot := *m.Boot
	wantBoot.Kernel, wantBoot.Initrd = filepath.Base(h.GoldenKernel(version)), filepath.Base(h.GoldenInitrd(version))
	wantManifest.File, wantManifest.Boot = filepath.Base(h.Golden(version)), &wantBoot
	if diff := cmp.Diff(wantManifest, got); diff != "" {
		t.Errorf("registered manifest mismatch (-want +got):\n%s", diff)
	}
	for _, p := range []string{h.Golden(version), h.GoldenKernel(version), h.GoldenInitrd(version)} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != ImageFileMode {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, ImageFileMode)
		}
	}
	if latest, err := Latest(h, home.Golden); err != nil || latest != img {
		t.Errorf("Latest(golden) = %+v, %v; want the registered image", latest, err)
	}

	// The same image again is a no-op.
	if again, err := Register(h, path); err != nil || again != img {
		t.Errorf("Register() of the same image again = %+v, %v; want %+v", again, err, img)
	}

	if found, ok := FindBuilt(h, home.Golden, "0123456789abcdef"); !ok || found.Version != version {
		t.Errorf("FindBuilt() of the registered digest = %+v, %v; want version %s", found, ok, version)
	}
	if _, ok := FindBuilt(h, home.Golden, "fedcba9876543210"); ok {
		t.Error("FindBuilt() of another digest found an image")
	}
	if _, ok := FindBuilt(h, home.Runtime, "0123456789abcdef"); ok {
		t.Error("FindBuilt() of another kind found an image")
	}
	os.Chmod(h.GoldenInitrd(version), 0o644)
	os.WriteFile(h.GoldenInitrd(version), []byte("changed"), 0o644)
	if _, ok := FindBuilt(h, home.Golden, "0123456789abcdef"); ok {
		t.Error("FindBuilt() found an image whose initramfs changed after it was registered")
	}
}

func TestRegisterRefusesAFileItsManifestDoesNotDescribe(t *testing.T) {
	h := home.Layout{Root: t.TempDir()}
	const version = "20261130T120000Z-0123456789abcdef"
	path, _ := built(t, version)
	os.WriteFile(filepath.Join(filepath.Dir(path), "disk.qcow2"), []byte("another disk"), 0o644)
	if _, err := Register(h, path); err == nil || !strings.Contains(err.Error(), "its manifest says") {
		t.Fatalf("Register() of a changed disk = %v, want a digest mismatch", err)
	}
	if _, err := Get(h, home.Golden, version); !errors.Is(err, ErrNoImage) {
		t.Errorf("Get() after a refused registration = %v, want ErrNoImage", err)
	}
}

func TestDefaultGolden(t *testing.T) {
	// register writes no Desktop; desktop() rewrites a manifest with it.
	desktop := func(t *testing.T, img Image) {
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		m.Desktop = true
		b, _ := json.Marshal(m)
		if err := os.WriteFile(img.ManifestPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string]struct {
		reason string
		setup  func(t *testing.T, h home.Layout)
		want   string // version, or "" for ErrNoImage
	}{
		"none": {reason: "a fresh home has nothing to give", setup: func(*testing.T, home.Layout) {}},
		"test image only": {
			reason: "a host that only runs the tests boots the test image",
			setup:  func(t *testing.T, h home.Layout) { register(t, h, home.Golden, "20261130T000000Z-test", "t") },
			want:   "20261130T000000Z-test",
		},
		"test image newer than the golden image": {
			reason: "make test-image after image build does not take new Dots off the desktop",
			setup: func(t *testing.T, h home.Layout) {
				desktop(t, register(t, h, home.Golden, "20261130T000000Z-full", "g"))
				register(t, h, home.Golden, "20261201T000000Z-test", "t")
			},
			want: "20261130T000000Z-full",
		},
		"two golden images": {
			reason: "the newest full golden image wins",
			setup: func(t *testing.T, h home.Layout) {
				desktop(t, register(t, h, home.Golden, "20261130T000000Z-old", "o"))
				desktop(t, register(t, h, home.Golden, "20261201T000000Z-new", "n"))
			},
			want: "20261201T000000Z-new",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := home.Layout{Root: t.TempDir()}
			tc.setup(t, h)
			img, err := DefaultGolden(h)
			if tc.want == "" {
				if !errors.Is(err, ErrNoImage) {
					t.Errorf("%s: DefaultGolden() = %v, %v; want ErrNoImage", tc.reason, img.Version, err)
				}
				return
			}
			if err != nil || img.Version != tc.want {
				t.Errorf("%s: DefaultGolden() = %q, %v; want %q", tc.reason, img.Version, err, tc.want)
			}
		})
	}
}
