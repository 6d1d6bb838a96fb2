// Package images keeps the images registered under $HOME/images/ (ref 3.2):
// golden disks and runtime ISOs, each beside its manifest. It registers what
// a builder wrote into a folder (guest/image/artifact) under the home's names,
// lists the registered images, picks the newest, and verifies a file against
// its manifest's digest. The driver and doctor read them here.
package images

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/renameio/v2"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Image is one registered image.
type Image struct {
	Kind    home.ImageKind
	Version string
	// File and Manifest are absolute paths.
	File         string
	ManifestPath string
}

// List returns the images of a kind whose file and manifest both exist,
// oldest first (versions are "<date>-<digest>", so they sort by age).
func List(h home.Layout, kind home.ImageKind) ([]Image, error) {
	entries, err := os.ReadDir(h.Images())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", h.Images(), err)
	}
	var out []Image
	for _, e := range entries {
		k, v, ok := home.ParseImageFile(e.Name())
		if !ok || k != kind {
			continue
		}
		img := Image{Kind: k, Version: v, File: h.ImageFile(k, v), ManifestPath: h.ImageManifest(k, v)}
		if _, err := os.Stat(img.ManifestPath); err != nil {
			continue
		}
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool { return home.OlderImage(out[i].Version, out[j].Version) })
	return out, nil
}

// ErrNoImage: no image of the kind is registered.
var ErrNoImage = errors.New("no image registered")

// Latest returns the newest registered image of a kind.
func Latest(h home.Layout, kind home.ImageKind) (Image, error) {
	all, err := List(h, kind)
	if err != nil {
		return Image{}, err
	}
	if len(all) == 0 {
		return Image{}, fmt.Errorf("%w: no %s image in %s (build one: make test-image, or invisible-dots image build)", ErrNoImage, kind, h.Images())
	}
	return all[len(all)-1], nil
}

// LatestDesktop returns the newest registered golden image that is a full
// golden image (its manifest says Desktop: `invisible-dots image build`),
// not the test image. It reads manifests, not the images: Verify is the
// doctor's.
func LatestDesktop(h home.Layout) (Image, bool) {
	all, err := List(h, home.Golden)
	if err != nil {
		return Image{}, false
	}
	for i := len(all) - 1; i >= 0; i-- {
		if m, err := all[i].Manifest(); err == nil && m.Desktop {
			return all[i], true
		}
	}
	return Image{}, false
}

// DefaultGolden is the golden image a new Computer that names none is made
// from: the newest full golden image (with the desktop) when there is one,
// else the newest golden image (the test image, on hosts that only run the
// tests). A test image registered after `image build` (make test-image into
// the same home) so does not take a person's new Dots off the desktop.
func DefaultGolden(h home.Layout) (Image, error) {
	if img, ok := LatestDesktop(h); ok {
		return img, nil
	}
	return Latest(h, home.Golden)
}

// Get returns the image of a kind and version, checking that its file and
// manifest exist.
func Get(h home.Layout, kind home.ImageKind, version string) (Image, error) {
	if err := home.ValidVersion(version); err != nil {
		return Image{}, err
	}
	img := Image{Kind: kind, Version: version, File: h.ImageFile(kind, version), ManifestPath: h.ImageManifest(kind, version)}
	for _, p := range []string{img.File, img.ManifestPath} {
		if _, err := os.Stat(p); err != nil {
			return Image{}, fmt.Errorf("%w: %s image %q: %s is missing (build it, or name a registered image)", ErrNoImage, kind, version, p)
		}
	}
	return img, nil
}

// FindBuilt returns the newest registered image of a kind that was built
// from the inputs digest names (a builder's versions are
// "<date>-<digest of the inputs>") and still verifies.
func FindBuilt(h home.Layout, kind home.ImageKind, digest string) (protocol.ImageManifest, bool) {
	all, err := List(h, kind)
	if err != nil {
		return protocol.ImageManifest{}, false
	}
	for i := len(all) - 1; i >= 0; i-- {
		if strings.HasSuffix(all[i].Version, "-"+digest) {
			if m, err := all[i].Verify(); err == nil {
				return m, true
			}
		}
	}
	return protocol.ImageManifest{}, false
}

// Register copies the image a builder wrote (the manifest at manifestPath and
// the files it names beside it) into h's images/ under the home's names,
// read-only, and writes its manifest there last: that is what registers it.
// An image of the same kind and version registered already and intact, with
// the same digests, is returned as it is. A registered image is never
// overwritten (DESIGN 5): VMs' overlays use it as their backing file, so
// one of the same version with other digests, or one that no longer
// verifies, is refused with ErrRegistered. Files an interrupted
// registration left without their manifest are not registered, and are
// written again.
func Register(h home.Layout, manifestPath string) (Image, error) {
	m, err := artifact.ReadManifest(manifestPath)
	if err != nil {
		return Image{}, err
	}
	kind := home.ImageKind(m.Kind)
	if err := home.ValidVersion(m.Version); err != nil {
		return Image{}, err
	}
	if img, registered, err := sameRegistered(h, kind, m); registered {
		return img, err
	}
	if err := h.NoteWrite(h.Images(), os.MkdirAll(h.Images(), 0o755)); err != nil {
		return Image{}, registerFailed(h, fmt.Errorf("make %s: %w", h.Images(), err))
	}
	src := filepath.Dir(manifestPath)
	img := Image{Kind: kind, Version: m.Version, File: h.ImageFile(kind, m.Version), ManifestPath: h.ImageManifest(kind, m.Version)}
	type fileCopy struct{ from, to, sha256 string }
	var copies []fileCopy
	if b := m.Boot; b != nil {
		boot := *b
		kernel, initrd := h.GoldenKernel(m.Version), h.GoldenInitrd(m.Version)
		copies = append(copies, fileCopy{filepath.Join(src, b.Kernel), kernel, b.KernelSHA256}, fileCopy{filepath.Join(src, b.Initrd), initrd, b.InitrdSHA256})
		boot.Kernel, boot.Initrd = filepath.Base(kernel), filepath.Base(initrd)
		m.Boot = &boot
	}
	copies = append(copies, fileCopy{filepath.Join(src, m.File), img.File, m.SHA256})
	// A registration that fails takes back the files it wrote: without
	// their manifest they are no image, and on a full disk they hold the
	// space a person is freeing.
	var written []string
	takeBack := func() {
		for _, p := range written {
			_ = os.Remove(p)
		}
	}
	for _, c := range copies {
		if err := h.NoteWrite(c.to, copyImageFile(c.from, c.to, c.sha256)); err != nil {
			takeBack()
			return Image{}, registerFailed(h, err)
		}
		written = append(written, c.to)
	}
	crashpoint.Hit(crashpoint.ImageFileWritten)
	m.File = filepath.Base(img.File)
	if err := h.NoteWrite(img.ManifestPath, artifact.WriteManifest(img.ManifestPath, m)); err != nil {
		takeBack()
		return Image{}, registerFailed(h, err)
	}
	return img, nil
}

// registerFailed is the error of a registration that failed; one the disk
// refused says so, with what to do.
func registerFailed(h home.Layout, err error) error {
	if home.DiskFull(err) {
		return fmt.Errorf("the disk is full: %w; fix: %s", err, h.DiskFullFix())
	}
	return err
}

// ErrRegistered: an image of that kind and version is registered already,
// and is not the one to register.
var ErrRegistered = errors.New("an image of this version is registered already")

// sameRegistered looks at the registered image of m's kind and version:
// none (registered false), the same one intact (returned), or another or a
// damaged one (ErrRegistered, saying what to do).
func sameRegistered(h home.Layout, kind home.ImageKind, m protocol.ImageManifest) (Image, bool, error) {
	img := Image{Kind: kind, Version: m.Version, File: h.ImageFile(kind, m.Version), ManifestPath: h.ImageManifest(kind, m.Version)}
	if _, err := os.Lstat(img.ManifestPath); errors.Is(err, os.ErrNotExist) {
		return Image{}, false, nil
	}
	refuse := func(why string) (Image, bool, error) {
		return Image{}, true, fmt.Errorf("%w: %s image %s: %s; a registered image is never overwritten, since VMs' disks may be built on it: register this one under a new version (build it again), or, if no VM uses the old one, remove %s and %s by hand", ErrRegistered, kind, m.Version, why, img.File, img.ManifestPath)
	}
	prev, err := artifact.ReadManifest(img.ManifestPath)
	if err != nil {
		return refuse("its manifest cannot be read (" + err.Error() + ")")
	}
	if prev.SHA256 != m.SHA256 || bootSums(prev) != bootSums(m) {
		return refuse(fmt.Sprintf("it is registered with SHA-256 %s, the one to register has %s", prev.SHA256, m.SHA256))
	}
	if _, err := img.Verify(); err != nil {
		return refuse("the registered one does not verify (" + err.Error() + ")")
	}
	return img, true, nil
}

// bootSums are the digests of a direct-boot kernel and initramfs.
func bootSums(m protocol.ImageManifest) string {
	if m.Boot == nil {
		return ""
	}
	return m.Boot.KernelSHA256 + "/" + m.Boot.InitrdSHA256
}

// ImageFileMode is the mode of a registered image file: read-only, so a VM's
// overlay never writes through to the golden disk it is based on.
const ImageFileMode os.FileMode = 0o444

// copyImageFile copies from to to, read-only, checking on the way that its
// SHA-256 is the one its manifest says.
func copyImageFile(from, to, want string) error {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("register %s: %w", from, err)
	}
	defer in.Close()
	out, err := renameio.NewPendingFile(to, renameio.WithTempDir(filepath.Dir(to)), renameio.WithStaticPermissions(ImageFileMode))
	if err != nil {
		return fmt.Errorf("register %s: %w", from, err)
	}
	defer out.Cleanup()
	sum := sha256.New()
	if _, err := io.Copy(io.MultiWriter(out, sum), in); err != nil {
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != want {
		return fmt.Errorf("register %s: its SHA-256 is %s, its manifest says %s", from, got, want)
	}
	if err := out.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	return nil
}

// Manifest reads and validates the image's manifest, and checks that it
// describes this file.
func (img Image) Manifest() (protocol.ImageManifest, error) {
	m, err := artifact.ReadManifest(img.ManifestPath)
	if err != nil {
		return protocol.ImageManifest{}, err
	}
	if m.Kind != string(img.Kind) || m.Version != img.Version || m.File != filepath.Base(img.File) {
		return protocol.ImageManifest{}, fmt.Errorf("%s describes %s %s %q, not %s", img.ManifestPath, m.Kind, m.Version, m.File, filepath.Base(img.File))
	}
	return m, nil
}

// Verify re-hashes the image (and a direct-boot kernel and initramfs) and
// compares with its manifest. It reads the whole file: doctor's job, not a
// start's.
func (img Image) Verify() (protocol.ImageManifest, error) {
	m, err := img.Manifest()
	if err != nil {
		return m, err
	}
	check := func(path, want string) error {
		got, size, err := artifact.FileSHA256(path)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s has SHA-256 %s, its manifest says %s (%d bytes): the file changed after it was registered; rebuild it", path, got, want, size)
		}
		return nil
	}
	if err := check(img.File, m.SHA256); err != nil {
		return m, err
	}
	if b := m.Boot; b != nil {
		dir := filepath.Dir(img.File)
		if err := check(filepath.Join(dir, b.Kernel), b.KernelSHA256); err != nil {
			return m, err
		}
		if err := check(filepath.Join(dir, b.Initrd), b.InitrdSHA256); err != nil {
			return m, err
		}
	}
	return m, nil
}

// ErrNoDesktopImage says a home holds no golden image with the desktop, or
// no runtime ISO beside it.
var ErrNoDesktopImage = errors.New("no golden image with the desktop and runtime ISO")

// ShareDesktop registers in dst the newest golden image with the desktop of
// src and src's newest runtime ISO, as symbolic links to their files, their
// manifests and the golden image's kernel and initramfs: registered images
// are never modified, so homes may share them. It is how a test boots the
// image `make golden-image` built once in a fresh home of its own. Without
// one in src the error wraps ErrNoDesktopImage.
func ShareDesktop(src, dst home.Layout) (golden, runtime Image, err error) {
	golden, ok := LatestDesktop(src)
	if !ok {
		return Image{}, Image{}, fmt.Errorf("%w in %s: build one with `invisible-dots image build` (make golden-image)", ErrNoDesktopImage, src.Images())
	}
	if runtime, err = Latest(src, home.Runtime); err != nil {
		return Image{}, Image{}, fmt.Errorf("%w in %s: %v", ErrNoDesktopImage, src.Images(), err)
	}
	m, err := golden.Manifest()
	if err != nil {
		return Image{}, Image{}, err
	}
	files := []string{golden.File, golden.ManifestPath, runtime.File, runtime.ManifestPath}
	if b := m.Boot; b != nil {
		files = append(files, filepath.Join(src.Images(), b.Kernel), filepath.Join(src.Images(), b.Initrd))
	}
	for _, f := range files {
		if err := os.Symlink(f, filepath.Join(dst.Images(), filepath.Base(f))); err != nil {
			return Image{}, Image{}, err
		}
	}
	if golden, err = Get(dst, home.Golden, golden.Version); err != nil {
		return Image{}, Image{}, err
	}
	if runtime, err = Get(dst, home.Runtime, runtime.Version); err != nil {
		return Image{}, Image{}, err
	}
	return golden, runtime, nil
}
