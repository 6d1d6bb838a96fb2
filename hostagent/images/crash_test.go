package images

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// rebuilt is the image of built(version) built again with another disk: the
// same version, another digest.
func rebuilt(t *testing.T, version string) string {
	t.Helper()
	path, m := built(t, version)
	disk := filepath.Join(filepath.Dir(path), m.File)
	if err := os.WriteFile(disk, []byte("another build of "+version), 0o644); err != nil {
		t.Fatal(err)
	}
	m.SHA256, m.Size, _ = artifact.FileSHA256(disk)
	if err := artifact.WriteManifest(path, m); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRegisterNeverOverwrites: a registered image is never overwritten,
// under overlays that may use it as their backing file: one of the same
// version with another digest is refused, saying to use a new version, and
// so is any registration over a registered image that no longer verifies.
func TestRegisterNeverOverwrites(t *testing.T) {
	const version = "20261130T120000Z-0123456789abcdef"
	for name, tc := range map[string]struct {
		reason string
		damage bool
	}{
		"another build":    {reason: "the same version with another digest is refused; the registered file stays as it was"},
		"damaged original": {reason: "a registered image that no longer verifies is not replaced under its overlays", damage: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := home.Layout{Root: t.TempDir()}
			first, _ := built(t, version)
			img, err := Register(h, first)
			if err != nil {
				t.Fatal(err)
			}
			src := first
			if tc.damage {
				os.Chmod(img.File, 0o644)
				os.WriteFile(img.File, []byte("bit rot"), 0o644)
			} else {
				src = rebuilt(t, version)
			}
			before, _ := os.ReadFile(img.File)
			_, err = Register(h, src)
			if !errors.Is(err, ErrRegistered) || !strings.Contains(err.Error(), "never overwritten") || !strings.Contains(err.Error(), "new version") {
				t.Fatalf("%s\nRegister() = %v; want ErrRegistered saying to register a new version", tc.reason, err)
			}
			if after, _ := os.ReadFile(img.File); string(after) != string(before) {
				t.Errorf("%s\nthe registered file changed: %q, was %q", tc.reason, after, before)
			}
		})
	}
}

// TestRegisterKilledBetweenFileAndManifest: a registration killed after its
// files were written and before its manifest leaves nothing registered (the
// manifest registers it), and registering again completes it: one image,
// intact, of the same version.
func TestRegisterKilledBetweenFileAndManifest(t *testing.T) {
	const version = "20261130T120000Z-0123456789abcdef"
	h := home.Layout{Root: t.TempDir()}
	path, _ := built(t, version)
	died := make(chan struct{})
	remove := crashpoint.OnHit(crashpoint.ImageFileWritten, runtime.Goexit)
	go func() {
		defer close(died)
		_, _ = Register(h, path)
		t.Error("Register() returned; it should have died at " + crashpoint.ImageFileWritten)
	}()
	<-died
	remove()
	if _, err := os.Stat(h.Golden(version)); err != nil {
		t.Fatalf("the image file was not written before the kill: %v", err)
	}
	if all, err := List(h, home.Golden); err != nil || len(all) != 0 {
		t.Fatalf("List() after the kill = %+v, %v; want nothing registered (no manifest)", all, err)
	}
	if _, err := Latest(h, home.Golden); !errors.Is(err, ErrNoImage) {
		t.Errorf("Latest() after the kill = %v; want ErrNoImage", err)
	}

	// The build of the same version again, or another build of it, is
	// registered over the files that were never registered.
	again := rebuilt(t, version)
	img, err := Register(h, again)
	if err != nil {
		t.Fatalf("Register() after the kill: %v", err)
	}
	if _, err := img.Verify(); err != nil {
		t.Errorf("the image registered after the kill does not verify: %v", err)
	}
	if all, _ := List(h, home.Golden); len(all) != 1 || all[0].Version != version {
		t.Errorf("List() = %+v; want the one image %s", all, version)
	}
}
