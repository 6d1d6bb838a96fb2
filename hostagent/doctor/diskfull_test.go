package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/home/smallfs"
)

// TestHomeRowOnAFullDisk: the home on a small tmpfs, filled. The free space
// the doctor is told is plenty (as a filesystem with reserved blocks or a
// quota may say), yet the home row fails: its probe write is refused. The
// row says the disk is full and its fix is a command a person can paste
// (df -h on the home) with the step beside it; the probe leaves nothing
// behind, and the row is ok again once the space returns.
func TestHomeRowOnAFullDisk(t *testing.T) {
	root, ok := smallfs.Mount(t, "4m")
	if !ok {
		return
	}
	h := home.Layout{Root: filepath.Join(root, "home")}
	if err := os.MkdirAll(h.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	registerImages(t, h)
	m := goodMachine(t)
	row := func() Check {
		t.Helper()
		c, ok := Run(context.Background(), m.deps(t, h)).Row(RowHome)
		if !ok {
			t.Fatal("no home row")
		}
		return c
	}
	if c := row(); c.Status != OK {
		t.Fatalf("home row on a roomy disk = %+v; want ok", c)
	}

	filler := smallfs.Fill(t, root)
	c := row()
	if c.Status != Failed || !strings.Contains(c.Detail, "the disk is full") || !strings.Contains(c.Detail, "no space left on device") {
		t.Errorf("home row on a full disk = %+v; want failed, saying the disk is full", c)
	}
	if c.Fix != "df -h "+h.Root || !strings.Contains(c.FixWhy, "free space") {
		t.Errorf("home row's fix %q (%q); want `df -h %s` and the step beside it", c.Fix, c.FixWhy, h.Root)
	}
	checkFixes(t, "a full disk", Report{Checks: []Check{c}})
	t.Logf("on a full disk:\n%s", Render(Report{Checks: []Check{c}}))
	if leftovers, _ := filepath.Glob(filepath.Join(h.Root, ".write-probe-*")); len(leftovers) != 0 {
		t.Errorf("the probe left %v behind", leftovers)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if c := row(); c.Status != OK {
		t.Errorf("home row once the space returned = %+v; want ok", c)
	}
}
