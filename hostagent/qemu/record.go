package qemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// record is qemu.json: the one record of which process and which port belong
// to a VM (ref 3.2). It is written right after the spawn, from the spawned
// process's pid and the port passed to QEMU, never from QEMU's own -pidfile.
type record struct {
	PID       int `json:"pid"`
	GuestPort int `json:"guest_port"`
	home.Stamp
	// ProcStartTicks is the process's start time in clock ticks since boot
	// (/proc/<pid>/stat field 22). A pid handed to another process later has
	// another start time, so the record cannot be mistaken for it.
	ProcStartTicks uint64    `json:"proc_start_ticks,omitempty"`
	StartedAt      time.Time `json:"started_at"`
	QEMU           string    `json:"qemu"`
	GoldenImage    string    `json:"golden_image"`
	RuntimeImage   string    `json:"runtime_image"`
	CPUs           int       `json:"cpus,omitempty"`
	MemoryMiB      int64     `json:"memory_mib,omitempty"`
}

func (r record) validate() error {
	if r.PID <= 0 {
		return fmt.Errorf("pid %d is not a process id", r.PID)
	}
	if r.GuestPort <= 0 || r.GuestPort > 65535 {
		return fmt.Errorf("guest_port %d is not a TCP port", r.GuestPort)
	}
	if r.HostUptimeS < 0 {
		return fmt.Errorf("host_uptime_s %v is negative", r.HostUptimeS)
	}
	return nil
}

// errNoRecord: there is no qemu.json.
var errNoRecord = errors.New("no qemu.json")

// readRecord reads qemu.json. errNoRecord when it does not exist; any other
// error means the VM's state is ERROR (a QEMU may still run on the disk).
func readRecord(path string) (record, error) { return decodeRecord(path, record.validate) }

// decodeRecord reads the record at path and checks it with valid;
// errNoRecord when there is no file.
func decodeRecord(path string, valid func(record) error) (record, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return record{}, errNoRecord
	}
	if err != nil {
		return record{}, fmt.Errorf("read %s: %w", path, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("%s does not parse: %w", path, err)
	}
	if err := valid(r); err != nil {
		return record{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// writeRecord writes qemu.json atomically: a reader sees the old file or the
// new one, never half of one.
func writeRecord(path string, r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return replaceFile(path, append(b, '\n'), home.PrivateFileMode)
}

// replaceFile writes data with mode to a temporary file beside path, syncs it
// and renames it over path.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(mode))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer f.Cleanup()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
