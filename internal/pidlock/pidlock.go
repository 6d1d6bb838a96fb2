// Package pidlock is acquirePidLock of ref 3.2: a lock file (server.lock, the
// build locks) that records its holder's pid with the host's boot id and
// uptime, so a record from before a host restart is recognized as stale
// without trusting a pid the system may since have handed to another process.
//
// A lock is taken over only when it is stale (the host restarted, its pid is
// gone, or it names this process's own pid, which can only be an earlier
// holder's), only by the one process that creates <lock>.takeover first, and
// only after reading the lock again unchanged. It is released only by its
// holder. A refusal names the holder and the file to remove.
//
// A lock whose holder runs a child on its behalf (a build's builder VM)
// records it with SetChild: the lock stays live while either runs.
package pidlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/google/renameio/v2"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Record is a lock file's contents: {pid, host_uptime_s, boot_id}, plus the
// child process the holder runs on the lock's behalf, if any (a build's
// builder VM): while that child runs the lock is not stale, so a holder
// killed outright never has its work taken from under a child still using it.
type Record struct {
	PID      int `json:"pid"`
	ChildPID int `json:"child_pid,omitempty"`
	home.Stamp
}

func (r Record) String() string {
	s := fmt.Sprintf("pid %d", r.PID)
	if r.ChildPID != 0 {
		s += fmt.Sprintf(" with child pid %d", r.ChildPID)
	}
	return s + fmt.Sprintf(", written %.0f s after the host booted", r.HostUptimeS)
}

// Options are the seams of Acquire; the zero value is the real host.
type Options struct {
	// Boot reads the host's boot id and uptime; home.CurrentBoot when nil.
	Boot home.BootSource
	// Alive says whether a process runs; signal 0 when nil.
	Alive func(pid int) bool
	// PID is the pid to record; os.Getpid() when zero.
	PID int
}

func (o Options) withDefaults() Options {
	if o.Boot == nil {
		o.Boot = home.CurrentBoot
	}
	if o.Alive == nil {
		o.Alive = processAlive
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	return o
}

// ErrHeld is what a refused Acquire wraps.
var ErrHeld = errors.New("lock held")

// HeldError is a refusal: the lock is held by a live process, or cannot be
// read or taken over safely.
type HeldError struct {
	Path   string
	Holder *Record // nil when the file does not parse
	// Remove is the file a person removes once sure no holder runs.
	Remove string
	Reason string
}

func (e *HeldError) Error() string {
	who := "an unreadable record"
	if e.Holder != nil {
		who = e.Holder.String()
	}
	return fmt.Sprintf("%s is held (%s; %s): if no such process runs, remove %s and try again", e.Path, who, e.Reason, e.Remove)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is a held lock file.
type Lock struct {
	path string
	rec  Record
}

// Path is the lock file.
func (l *Lock) Path() string { return l.path }

// Record is what the lock file says of its holder.
func (l *Lock) Record() Record { return l.rec }

// maxRounds bounds the retries when the lock changes under us (a holder
// releasing it, another process taking it over first).
const maxRounds = 5

// Acquire takes the lock file at path, or refuses with a *HeldError.
func Acquire(path string, opts Options) (*Lock, error) {
	opts = opts.withDefaults()
	now, err := opts.Boot()
	if err != nil {
		return nil, err
	}
	mine := Record{PID: opts.PID, Stamp: now}
	body, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	body = append(body, '\n')

	for range maxRounds {
		created, err := createExclusive(path, body)
		if err != nil {
			return nil, err
		}
		if created {
			return &Lock{path: path, rec: mine}, nil
		}
		seen, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read the lock %s: %w", path, err)
		}
		var holder Record
		if err := json.Unmarshal(seen, &holder); err != nil || holder.PID <= 0 {
			return nil, &HeldError{Path: path, Remove: path, Reason: "its contents are not a lock record"}
		}
		if reason := live(holder, now, opts); reason != "" {
			return nil, &HeldError{Path: path, Holder: &holder, Remove: path, Reason: reason}
		}
		took, err := takeOver(path, seen, body, &holder)
		if err != nil || took {
			if err != nil {
				return nil, err
			}
			return &Lock{path: path, rec: mine}, nil
		}
	}
	return nil, fmt.Errorf("the lock %s kept changing while being taken: try again", path)
}

// AcquireWait takes the lock file at path as Acquire does, but while a live
// holder has it, waits for its release (polling every interval, 1 s when 0)
// instead of refusing, and tells waiting the first time it waits and each
// time the holder changes. A lock that cannot be read or taken over safely
// is refused at once, as by Acquire; ctx ends the wait.
func AcquireWait(ctx context.Context, path string, opts Options, interval time.Duration, waiting func(*HeldError)) (*Lock, error) {
	if interval <= 0 {
		interval = time.Second
	}
	var told *Record
	for {
		l, err := Acquire(path, opts)
		var held *HeldError
		if err == nil || !errors.As(err, &held) || held.Holder == nil {
			return l, err
		}
		if waiting != nil && (told == nil || *told != *held.Holder) {
			waiting(held)
			told = held.Holder
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// live says why holder still holds the lock, or "" when it is stale.
func live(holder Record, now home.Stamp, opts Options) string {
	switch {
	case !now.SameBoot(holder.Stamp):
		return "" // written before the host restarted
	case holder.PID == opts.PID:
		return "" // an earlier holder in this very process
	case opts.Alive(holder.PID):
		return "that process runs"
	case holder.ChildPID != 0 && opts.Alive(holder.ChildPID):
		return "its child process runs"
	}
	return ""
}

// takeOver replaces a stale lock whose bytes were seen. It reports false when
// the lock changed since (the caller looks again).
func takeOver(path string, seen, body []byte, holder *Record) (bool, error) {
	marker := home.Takeover(path)
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, &HeldError{Path: path, Holder: holder, Remove: marker,
			Reason: "another process is taking the stale lock over (" + filepath.Base(marker) + " exists)"}
	}
	if err != nil {
		return false, fmt.Errorf("create %s: %w", marker, err)
	}
	_, werr := f.Write(body)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	defer os.Remove(marker)
	if werr != nil {
		return false, fmt.Errorf("write %s: %w", marker, werr)
	}
	again, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !bytes.Equal(again, seen)) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the lock %s again: %w", path, err)
	}
	if err := replace(path, body); err != nil {
		return false, err
	}
	return true, nil
}

// createExclusive makes path with body, atomically: a reader sees no file or
// the whole record, never an empty one. It reports false when path exists.
// The record is written to a temporary file first and then linked, not
// renamed, into place: a rename would replace a lock another process holds.
func createExclusive(path string, body []byte) (bool, error) {
	f, err := pendingRecord(path, body)
	if err != nil {
		return false, err
	}
	defer f.Cleanup()
	if err := os.Link(f.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("create the lock %s: %w", path, err)
	}
	return true, nil
}

// replace writes body over path, atomically.
func replace(path string, body []byte) error {
	f, err := pendingRecord(path, body)
	if err != nil {
		return err
	}
	defer f.Cleanup()
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("replace the lock %s: %w", path, err)
	}
	return nil
}

// pendingRecord writes body, synced and private, to a temporary file beside
// path.
func pendingRecord(path string, body []byte) (*renameio.PendingFile, error) {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(0o600))
	if err != nil {
		return nil, fmt.Errorf("write the lock %s: %w", path, err)
	}
	_, err = f.Write(body)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Cleanup()
		return nil, fmt.Errorf("write the lock %s: %w", path, err)
	}
	return f, nil
}

// SetChild records the child process the holder runs on the lock's behalf
// (0 clears it), replacing the file atomically.
func (l *Lock) SetChild(pid int) error {
	if err := l.stillMine(); err != nil {
		return err
	}
	rec := l.rec
	rec.ChildPID = pid
	body, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := replace(l.path, append(body, '\n')); err != nil {
		return err
	}
	l.rec = rec
	return nil
}

func (l *Lock) stillMine() error {
	b, err := os.ReadFile(l.path)
	if err != nil {
		return fmt.Errorf("read the lock %s: %w", l.path, err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil || rec != l.rec {
		return fmt.Errorf("the lock %s no longer records this process (%s): left to its holder", l.path, strconv.Quote(string(bytes.TrimSpace(b))))
	}
	return nil
}

// Release removes the lock file if it still records this holder. A lock taken
// over meanwhile (this process was judged gone) is left to its new holder.
func (l *Lock) Release() error {
	if _, err := os.Stat(l.path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := l.stillMine(); err != nil {
		return err
	}
	if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the lock %s: %w", l.path, err)
	}
	return nil
}

// processAlive is signal 0: EPERM still means the process exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
