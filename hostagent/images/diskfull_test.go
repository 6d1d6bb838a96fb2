package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/home/smallfs"
)

// TestRegisterOnAFullDisk: the home on a small tmpfs, filled before the
// image's files are copied, or between its files and its manifest. The
// registration fails saying the disk is full and what to do, registers
// nothing, leaves neither a manifest nor a file of its own (nor a temporary
// one) behind, and the disk's refusal is remembered for the Host's
// DiskPressure; once the space returns the same image registers and
// verifies.
func TestRegisterOnAFullDisk(t *testing.T) {
	const version = "20261130T120000Z-0123456789abcdef"
	for name, tc := range map[string]struct {
		reason string
		// during is the commit point at which the disk fills; empty:
		// before the registration.
		during string
	}{
		"files":    {reason: "the image's file cannot be copied"},
		"manifest": {reason: "the files are in, the manifest that registers them cannot be written", during: crashpoint.ImageFileWritten},
	} {
		t.Run(name, func(t *testing.T) {
			root, ok := smallfs.Mount(t, "4m")
			if !ok {
				return
			}
			h := home.Layout{Root: filepath.Join(root, "home")}
			if err := os.MkdirAll(h.Images(), 0o755); err != nil {
				t.Fatal(err)
			}
			path, m := built(t, version)
			// A disk of 512 KiB: room to spare on the tmpfs until it is filled.
			disk := filepath.Join(filepath.Dir(path), m.File)
			if err := os.WriteFile(disk, make([]byte, 512<<10), 0o644); err != nil {
				t.Fatal(err)
			}
			m.SHA256, m.Size, _ = artifact.FileSHA256(disk)
			if err := artifact.WriteManifest(path, m); err != nil {
				t.Fatal(err)
			}

			var filler string
			unhook := func() {}
			if tc.during == "" {
				filler = smallfs.Fill(t, root)
			} else {
				unhook = crashpoint.OnHit(tc.during, func() { filler = smallfs.Fill(t, root) })
				defer unhook()
			}
			_, err := Register(h, path)
			if !home.DiskFull(err) || !strings.Contains(err.Error(), "the disk is full") || !strings.Contains(err.Error(), "df -h "+h.Root) {
				t.Fatalf("%s\nRegister() on a full disk = %v; want the disk full, with df -h on the home", tc.reason, err)
			}
			t.Logf("Register() on a full disk: %v", err)
			if w, ok := h.LastFullWrite(); !ok || !strings.HasPrefix(w.Path, h.Images()) {
				t.Errorf("%s\nLastFullWrite() = %+v, %v; want the refused write under %s", tc.reason, w, ok, h.Images())
			}
			if all, err := List(h, home.Golden); err != nil || len(all) != 0 {
				t.Errorf("%s\nList() = %+v, %v; want nothing registered", tc.reason, all, err)
			}
			entries, _ := os.ReadDir(h.Images())
			for _, e := range entries {
				t.Errorf("%s\n%s is left in images/ after the failed registration", tc.reason, e.Name())
			}

			unhook()
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			img, err := Register(h, path)
			if err != nil {
				t.Fatalf("%s\nRegister() once the space returned: %v", tc.reason, err)
			}
			if _, err := img.Verify(); err != nil {
				t.Errorf("%s\nthe image registered once the space returned does not verify: %v", tc.reason, err)
			}
			if _, ok := h.LastFullWrite(); ok {
				t.Errorf("%s\nthe refused write is still remembered after the registration succeeded", tc.reason)
			}
		})
	}
}
