package qemu

import (
	"os"
	"strings"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// logTail is the end of QEMU's log and of the serial console.
func (d *Driver) logTail(vm home.VM) string {
	var b strings.Builder
	if s := tail(vm.QEMULog(), 1024); s != "" {
		b.WriteString("qemu: " + s)
	}
	if s := tail(vm.SerialLog(), 2048); s != "" {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString("serial: " + s)
	}
	return b.String()
}

// tail returns up to max bytes from the end of a file, from a line start.
func tail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - max
	if off < 0 {
		off = 0
	}
	s := readFrom(path, off, max)
	if off > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}

// readFrom reads up to max bytes of a file from offset.
func readFrom(path string, offset, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, max)
	n, _ := f.ReadAt(buf, offset)
	return strings.TrimSpace(string(buf[:n]))
}
