// Package cpio writes the "newc" cpio archive the Linux kernel unpacks as an
// initramfs. Only what an initramfs needs: regular files, directories,
// symbolic links and device-less entries, with explicit owners and modes, so
// the archive is built without root and without the host's file owners.
package cpio

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Entry is one member of the archive.
type Entry struct {
	// Name is the path inside the archive, without a leading slash.
	Name string
	// Mode holds the type bits (fs.ModeDir, fs.ModeSymlink or none for a
	// regular file) and the permission bits, setuid, setgid and sticky
	// included.
	Mode fs.FileMode
	UID  int
	GID  int
	// Data is a regular file's content or a link's target.
	Data []byte
}

// Archive collects entries and writes them sorted by name, so the same
// entries always give the same bytes.
type Archive struct {
	entries map[string]Entry
}

// New returns an empty archive.
func New() *Archive { return &Archive{entries: map[string]Entry{}} }

// Add adds or replaces an entry, making its missing parent directories
// (root-owned, 0755).
func (a *Archive) Add(e Entry) error {
	e.Name = strings.TrimPrefix(path.Clean("/"+e.Name), "/")
	if e.Name == "" {
		return fmt.Errorf("cpio: an entry needs a name")
	}
	for dir := path.Dir(e.Name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, ok := a.entries[dir]; !ok {
			a.entries[dir] = Entry{Name: dir, Mode: fs.ModeDir | 0o755}
		}
	}
	a.entries[e.Name] = e
	return nil
}

// File adds a regular file.
func (a *Archive) File(name string, perm fs.FileMode, uid, gid int, data []byte) error {
	return a.Add(Entry{Name: name, Mode: perm, UID: uid, GID: gid, Data: data})
}

// Dir adds a directory.
func (a *Archive) Dir(name string, perm fs.FileMode, uid, gid int) error {
	return a.Add(Entry{Name: name, Mode: fs.ModeDir | perm, UID: uid, GID: gid})
}

// Symlink adds a symbolic link to target.
func (a *Archive) Symlink(name, target string) error {
	return a.Add(Entry{Name: name, Mode: fs.ModeSymlink | 0o777, Data: []byte(target)})
}

// Has reports whether name is in the archive.
func (a *Archive) Has(name string) bool {
	_, ok := a.entries[strings.TrimPrefix(path.Clean("/"+name), "/")]
	return ok
}

// rawMode is the st_mode of an entry.
func rawMode(m fs.FileMode) uint32 {
	v := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	switch {
	case m.IsDir():
		v |= 0o040000
	case m&fs.ModeSymlink != 0:
		v |= 0o120000
	default:
		v |= 0o100000
	}
	return v
}

// WriteTo writes the archive and its trailer.
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	// Parents sort before their children, so the kernel makes a directory
	// before what is in it.
	sort.Strings(names)
	cw := &countWriter{w: w}
	ino := uint32(1)
	for _, n := range names {
		e := a.entries[n]
		data := e.Data
		if e.Mode.IsDir() {
			data = nil
		}
		nlink := uint32(1)
		if e.Mode.IsDir() {
			nlink = 2
		}
		if err := writeHeader(cw, ino, rawMode(e.Mode), uint32(e.UID), uint32(e.GID), nlink, uint32(len(data)), n); err != nil {
			return cw.n, err
		}
		if _, err := cw.Write(data); err != nil {
			return cw.n, err
		}
		if err := pad(cw); err != nil {
			return cw.n, err
		}
		ino++
	}
	if err := writeHeader(cw, 0, 0, 0, 0, 1, 0, "TRAILER!!!"); err != nil {
		return cw.n, err
	}
	return cw.n, pad512(cw)
}

func writeHeader(w *countWriter, ino, mode, uid, gid, nlink, size uint32, name string) error {
	_, err := fmt.Fprintf(w, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%s\x00",
		ino, mode, uid, gid, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0, name)
	if err != nil {
		return err
	}
	return pad(w)
}

// pad aligns to 4 bytes, as newc requires after the header+name and after
// the data.
func pad(w *countWriter) error {
	if r := w.n % 4; r != 0 {
		_, err := w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}

func pad512(w *countWriter) error {
	if r := w.n % 512; r != 0 {
		_, err := w.Write(make([]byte, 512-r))
		return err
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
