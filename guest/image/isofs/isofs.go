// Package isofs writes the ISO 9660 images the host hands a guest (the NoCloud
// seed, the runtime ISO) and reads them back. It uses
// github.com/kdomanski/iso9660, so no ISO tool is needed on any host; names are
// recorded as given (no Rock Ridge, no Joliet), which is why guest/protocol
// keeps every file name to plain ISO 9660 characters.
package isofs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/renameio/v2"
	"github.com/kdomanski/iso9660"
)

// Write writes files (path in the image, "/"-separated, to content) as an ISO
// 9660 image labelled label at dest, replacing any file there at once, with
// mode. The writer stages the files in a private temporary directory of its
// own (0700) and removes it.
func Write(dest, label string, files map[string][]byte, mode os.FileMode) error {
	w, err := iso9660.NewWriter()
	if err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	defer w.Cleanup()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := w.AddFile(bytes.NewReader(files[n]), n); err != nil {
			return fmt.Errorf("write %s: add %s: %w", dest, n, err)
		}
	}
	f, err := renameio.NewPendingFile(dest, renameio.WithTempDir(filepath.Dir(dest)), renameio.WithStaticPermissions(mode))
	if err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	defer f.Cleanup()
	if err := w.WriteTo(f, label); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	return nil
}

// Read returns the label and every file of the ISO at path, by path in the
// image, as Linux shows them (a ";1" version suffix dropped).
func Read(path string) (string, map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	img, err := iso9660.OpenImage(f)
	if err != nil {
		return "", nil, fmt.Errorf("open %s as ISO 9660: %w", path, err)
	}
	label, err := img.Label()
	if err != nil {
		return "", nil, fmt.Errorf("read %s: %w", path, err)
	}
	root, err := img.RootDir()
	if err != nil {
		return "", nil, fmt.Errorf("read %s: %w", path, err)
	}
	files := map[string][]byte{}
	var walk func(dir *iso9660.File, prefix string) error
	walk = func(dir *iso9660.File, prefix string) error {
		children, err := dir.GetChildren()
		if err != nil {
			return err
		}
		for _, c := range children {
			name := prefix + strings.TrimSuffix(c.Name(), ";1")
			if c.IsDir() {
				if err := walk(c, name+"/"); err != nil {
					return err
				}
				continue
			}
			b, err := io.ReadAll(c.Reader())
			if err != nil {
				return err
			}
			files[name] = b
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return "", nil, fmt.Errorf("read %s: %w", path, err)
	}
	return label, files, nil
}
