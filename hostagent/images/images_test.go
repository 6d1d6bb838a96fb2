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
	sum, size, err := FileSHA256(file)
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
