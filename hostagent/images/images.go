// Package images finds the images registered under $HOME/images/ (ref 3.2):
// golden disks and runtime ISOs, each beside its manifest. It lists them,
// picks the newest, and verifies a file against its manifest's digest. The
// builders (guest/image) write them; the driver and doctor read them here.
package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
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
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
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

// Manifest reads and validates the image's manifest, and checks that it
// describes this file.
func (img Image) Manifest() (protocol.ImageManifest, error) {
	b, err := os.ReadFile(img.ManifestPath)
	if err != nil {
		return protocol.ImageManifest{}, fmt.Errorf("read manifest: %w", err)
	}
	var m protocol.ImageManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return protocol.ImageManifest{}, fmt.Errorf("parse %s: %w", img.ManifestPath, err)
	}
	if err := m.Validate(); err != nil {
		return protocol.ImageManifest{}, fmt.Errorf("%s: %w", img.ManifestPath, err)
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
		got, size, err := FileSHA256(path)
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

// FileSHA256 returns a file's SHA-256 in hex and its size.
func FileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
