package home

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/invisible-dots/invisible-dots/internal/home/smallfs"
)

func TestDiskFull(t *testing.T) {
	qemuImg := "qemu-img: /h/vms/a/b/.disk.qcow2.creating: Could not write qcow2 header: No space left on device\n"
	tests := map[string]struct {
		reason string
		err    error
		want   bool
	}{
		"ENOSPC":       {reason: "a write refused for want of space, wrapped twice", err: fmt.Errorf("write qemu.json: %w", &os.PathError{Op: "write", Path: "/h/.qemu.json1", Err: syscall.ENOSPC}), want: true},
		"EDQUOT":       {reason: "a quota is a full disk to its user", err: &os.PathError{Op: "write", Path: "/h/x", Err: syscall.EDQUOT}, want: true},
		"qemu-img":     {reason: "qemu-img's exit status, its output saying so", err: MarkDiskFull(errors.New("exit status 1"), qemuImg), want: true},
		"words only":   {reason: "a library that flattened the errno to text", err: MarkDiskFull(errors.New("writing files: write /h/seed: no space left on device"), "writing files: write /h/seed: no space left on device"), want: true},
		"other output": {reason: "qemu-img failing for another reason", err: MarkDiskFull(errors.New("exit status 1"), "qemu-img: Could not open backing file"), want: false},
		"EACCES":       {reason: "a write refused for another reason is not a full disk", err: &os.PathError{Op: "open", Path: "/h/x", Err: syscall.EACCES}, want: false},
		"nil":          {reason: "no error", err: MarkDiskFull(nil, qemuImg), want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := DiskFull(tc.err); got != tc.want {
				t.Errorf("%s\nDiskFull(%v) = %v; want %v", tc.reason, tc.err, got, tc.want)
			}
		})
	}
	if err := errors.New("exit status 1"); MarkDiskFull(err, qemuImg).Error() != err.Error() {
		t.Errorf("MarkDiskFull changed the message: %q", MarkDiskFull(err, qemuImg))
	}
}

// TestNoteWrite: a refused write is remembered with the time of its first
// failure while it keeps failing, and forgotten when a write succeeds; a
// failure that is not the disk's is not remembered.
func TestNoteWrite(t *testing.T) {
	// A filesystem of its own: on a shared one, space others free would
	// count as space returned.
	root, ok := smallfs.Mount(t, "1m")
	if !ok {
		return
	}
	h := Layout{Root: root}
	full := &os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}
	h.NoteWrite("/h/a", &os.PathError{Op: "open", Path: "/h/a", Err: syscall.EACCES})
	if w, ok := h.LastFullWrite(); ok {
		t.Fatalf("a permission error is remembered as a full disk: %+v", w)
	}
	h.NoteWrite("/h/a", full)
	first, ok := h.LastFullWrite()
	if !ok || first.Path != "/h/a" {
		t.Fatalf("LastFullWrite() = %+v, %v; want /h/a", first, ok)
	}
	h.NoteWrite("/h/a", full)
	if again, _ := h.LastFullWrite(); !again.At.Equal(first.At) {
		t.Errorf("the same write failing again moved its time from %v to %v", first.At, again.At)
	}
	if _, ok := (Layout{Root: root + "/other"}).LastFullWrite(); ok {
		t.Error("another home remembers this home's write")
	}
	h.NoteWrite("/h/b", nil)
	if w, ok := h.LastFullWrite(); ok {
		t.Errorf("a write succeeded and the refused one is still remembered: %+v", w)
	}
}
