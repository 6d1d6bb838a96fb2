package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeptWork: a failed build's scratch folder is kept under its version's
// name (ref 3.2 .golden-<v>.work) with what it held, and the next build
// removes it and says so, leaving everything else in the work folder.
func TestKeptWork(t *testing.T) {
	work := t.TempDir()
	scratch, err := os.MkdirTemp(work, "build-")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(scratch, "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "left-by-the-failed-step"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(work, KeptWorkPrefix+"20261205T000000Z-abc.work")
	if err := keepWork(scratch, root, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(kept, "root", "etc", "left-by-the-failed-step")); err != nil {
		t.Fatalf("the kept work lost what the failed step left: %v", err)
	}
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Errorf("the scratch folder is still there beside the kept one: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(work, "debs"), 0o755); err != nil {
		t.Fatal(err)
	}
	var said []string
	removeKeptWork(work, func(f string, a ...any) { said = append(said, f) })
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Errorf("the next build left the kept work: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "debs")); err != nil {
		t.Errorf("removing the kept work removed the package cache: %v", err)
	}
	if len(said) != 1 || !strings.Contains(said[0], "earlier failed build") {
		t.Errorf("said %q; want the removal said", said)
	}
}
