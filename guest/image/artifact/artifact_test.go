package artifact

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestManifestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "runtime.iso")
	if err := os.WriteFile(file, []byte("iso"), 0o444); err != nil {
		t.Fatal(err)
	}
	sum, size, err := FileSHA256(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256([]byte("iso"))); sum != want || size != 3 {
		t.Fatalf("FileSHA256() = %q, %d; want %q, 3", sum, size, want)
	}
	m := protocol.ImageManifest{Kind: protocol.ImageKindRuntime, Version: "20261130T120000Z-abc", File: "runtime.iso", SHA256: sum, Size: size, Created: "2026-11-30T12:00:00Z"}
	path := filepath.Join(dir, "runtime.json")
	if err := WriteManifest(path, m); err != nil {
		t.Fatal(err)
	}
	got, err := ReadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, got); diff != "" {
		t.Errorf("ReadManifest() mismatch (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != ManifestMode {
		t.Errorf("manifest mode = %v (%v), want %v", fi.Mode().Perm(), err, ManifestMode)
	}
}

func TestWriteManifestRefusesAnInvalidOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "golden.json")
	err := WriteManifest(path, protocol.ImageManifest{Kind: protocol.ImageKindGolden, Version: "v1", File: "../escape", SHA256: strings.Repeat("0", 64)})
	if err == nil {
		t.Fatal("WriteManifest() of a manifest naming a file outside its folder: want an error")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("an invalid manifest was written: %v", err)
	}
}
