// Package artifact is what an image builder hands over: a folder holding each
// image's files beside its manifest (protocol.ImageManifest), whose File and
// Boot name files in that same folder. The builders (guest/image) write such
// folders; registering an image in a home, under the home's names, is the host
// agent's job (hostagent/images).
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// ManifestMode is the mode of a manifest file: readable by everyone, as the
// images it describes are.
const ManifestMode os.FileMode = 0o644

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

// WriteManifest validates m and writes it to path, replacing any file there
// at once.
func WriteManifest(path string, m protocol.ImageManifest) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("write the manifest %s: %w", path, err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write the manifest %s: %w", path, err)
	}
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithPermissions(ManifestMode))
	if err != nil {
		return fmt.Errorf("write the manifest %s: %w", path, err)
	}
	defer f.Cleanup()
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write the manifest %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write the manifest %s: %w", path, err)
	}
	return nil
}

// ReadManifest reads and validates the manifest at path.
func ReadManifest(path string) (protocol.ImageManifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return protocol.ImageManifest{}, fmt.Errorf("read manifest: %w", err)
	}
	var m protocol.ImageManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return protocol.ImageManifest{}, fmt.Errorf("parse %s: %w", path, err)
	}
	if err := m.Validate(); err != nil {
		return protocol.ImageManifest{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// CopyFile copies from to to with mode, replacing any file there at once.
func CopyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := WriteFile(to, in, mode); err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	return nil
}

// WriteFile writes r to path with mode, replacing any file there at once:
// an image's files are never seen half written.
func WriteFile(path string, r io.Reader, mode os.FileMode) error {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(mode))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer f.Cleanup()
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SparseFile creates (or truncates) path as a sparse file of size bytes: the
// raw disk a file system is made in before it becomes a qcow2.
func SparseFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// HashFiles writes a line "PATH SHA256-HEX" to w for every file under root
// of fsys, in lexical order: the part of an image's version that its
// embedded recipe files (units, scripts, configuration) decide.
func HashFiles(w io.Writer, fsys fs.ReadFileFS, root string) error {
	return fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fsys.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s %x\n", p, sha256.Sum256(data))
		return err
	})
}
