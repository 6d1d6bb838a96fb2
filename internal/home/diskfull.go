package home

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrDiskFull is a write the filesystem refused for want of room, known only
// from words: a program that prints the error (qemu-img's "No space left on
// device") or a library that flattened it to text. MarkDiskFull makes such an
// error one DiskFull finds.
var ErrDiskFull = errors.New("no space left on device")

// DiskFull says whether err is a write the filesystem refused for want of
// space (ENOSPC) or of the user's quota (EDQUOT). It is the host's one test of
// "the disk is full": the driver's records and overlay, image registration,
// the heartbeat and the doctor all ask it.
func DiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, ErrDiskFull)
}

// SaysDiskFull says whether a program's output or an error's text reports the
// disk full: strerror(ENOSPC) and strerror(EDQUOT), in C's and in Go's case.
func SaysDiskFull(text string) bool {
	t := strings.ToLower(text)
	return strings.Contains(t, "no space left on device") || strings.Contains(t, "disk quota exceeded")
}

// MarkDiskFull returns err so that DiskFull finds it when text says the disk
// is full and err does not carry the errno itself (qemu-img's exit status and
// its stderr); its message is err's. Any other err is returned as it is.
func MarkDiskFull(err error, text string) error {
	if err == nil || DiskFull(err) || !SaysDiskFull(text) {
		return err
	}
	return markedFull{err}
}

type markedFull struct{ error }

func (m markedFull) Unwrap() error      { return m.error }
func (markedFull) Is(target error) bool { return target == ErrDiskFull }

// DiskFullFix is what a person does about a full disk under this home: the
// command that shows the filesystem, and the step.
func (h Layout) DiskFullFix() string {
	return "df -h " + h.Root + "  (" + h.DiskFullWhy() + ")"
}

// DiskFullWhy is the step beside DiskFullFix's command: what df shows, and
// what to do.
func (h Layout) DiskFullWhy() string {
	return fmt.Sprintf("how full the home's filesystem is; free space there, `du -xsh %s/*` shows what the home holds, or move the home to a larger filesystem with %s", h.Root, EnvHome)
}

// FullWrite is a write under a home that the disk refused.
type FullWrite struct {
	Path string
	Err  string
	At   time.Time
	// FreeBytes is what the filesystem had free right after the failure.
	FreeBytes uint64
}

// String says which write failed, when and why.
func (w FullWrite) String() string {
	return fmt.Sprintf("writing %s failed at %s: %s", w.Path, w.At.UTC().Format(time.RFC3339), w.Err)
}

// spaceReturned is how much more free space than at a failed write counts as
// space having returned: more than the filesystem's own noise (a log line, a
// temporary file), less than any record, seed or overlay header needs.
const spaceReturned = 1 << 20

// fullWrites is the last write each home's disk refused, by home root: the
// process's memory of it, read by the heartbeat (the Host's DiskPressure) and
// the server's doctor.
var fullWrites = struct {
	sync.Mutex
	last map[string]FullWrite
}{last: map[string]FullWrite{}}

// NoteWrite records how a write of path under the home ended and returns err
// as it is. A write the disk refused (DiskFull) is remembered until a later
// write under the home succeeds or space returns (LastFullWrite); a write
// that succeeds ends that memory; other failures are not the disk's and are
// not remembered.
func (h Layout) NoteWrite(path string, err error) error {
	switch {
	case err == nil:
		fullWrites.Lock()
		delete(fullWrites.last, h.Root)
		fullWrites.Unlock()
	case DiskFull(err):
		free, _ := freeBytes(h.Root)
		w := FullWrite{Path: path, Err: err.Error(), At: time.Now(), FreeBytes: free}
		fullWrites.Lock()
		if prev, ok := fullWrites.last[h.Root]; ok && prev.Path == path {
			// The same write failing again (a start retried) is one
			// failure since the first: what reports it does not change.
			w.At = prev.At
		}
		fullWrites.last[h.Root] = w
		fullWrites.Unlock()
	}
	return err
}

// LastFullWrite returns the last write under the home that the disk refused,
// unless a write has succeeded since or the filesystem has since gained
// space (a megabyte more free than right after the failure).
func (h Layout) LastFullWrite() (FullWrite, bool) {
	fullWrites.Lock()
	w, ok := fullWrites.last[h.Root]
	fullWrites.Unlock()
	if !ok {
		return FullWrite{}, false
	}
	if free, err := freeBytes(h.Root); err == nil && free >= w.FreeBytes+spaceReturned {
		fullWrites.Lock()
		if cur, ok := fullWrites.last[h.Root]; ok && cur == w {
			delete(fullWrites.last, h.Root)
		}
		fullWrites.Unlock()
		return FullWrite{}, false
	}
	return w, true
}

// probeSize is what a probe write writes: one page, the least a filesystem
// allocates.
const probeSize = 4096

// ProbeWrite writes a small file in dir, syncs it and removes it: whether the
// filesystem takes a write now. The doctor and the heartbeat run it; a full
// disk fails it with ENOSPC (DiskFull).
func ProbeWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".write-probe-")
	if err != nil {
		return fmt.Errorf("write a probe file in %s: %w", dir, err)
	}
	name := f.Name()
	_, err = f.Write(make([]byte, probeSize))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(name); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("write a probe file in %s: %w", dir, err)
	}
	return nil
}

// freeBytes is the space an unprivileged write may still take on the
// filesystem of path.
func freeBytes(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
