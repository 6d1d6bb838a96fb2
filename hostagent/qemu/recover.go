package qemu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// readPending reads a start's pending record (qemu.json as it will be,
// written before QEMU is spawned, so without its pid); errNoRecord when
// there is none.
func readPending(path string) (record, error) {
	return decodeRecord(path, func(r record) error {
		if r.GuestPort <= 0 || r.GuestPort > 65535 {
			return fmt.Errorf("guest_port %d is not a TCP port", r.GuestPort)
		}
		return nil
	})
}

// Recovered says what recoverStarts did with a start an agent died in.
type Recovered struct {
	ID home.VMID
	// PID is the QEMU found and adopted (its qemu.json written); 0 when
	// none of that start runs.
	PID int
}

// recoverStarts finishes the starts an earlier agent on this home was killed
// in, between QEMU's spawn and its qemu.json (a pending record and no
// qemu.json): the QEMU of that start, found by its -name and guest port
// among this user's processes of this boot, is adopted (its record
// written); when none runs, the pending record is dropped. A pending record
// beside a qemu.json, or of an earlier boot, is dropped. No QEMU is ever
// left running unrecorded, so none can hold a disk a new start then finds
// locked.
func (d *Driver) recoverStarts() ([]Recovered, error) {
	paths, err := filepath.Glob(filepath.Join(d.home.VMs(), "*", "*", home.StartPendingFile))
	if err != nil {
		return nil, err
	}
	var out []Recovered
	for _, p := range paths {
		dir := filepath.Dir(p)
		id := home.VMID{Namespace: filepath.Base(filepath.Dir(dir)), Name: filepath.Base(dir)}
		if id.Validate() != nil {
			continue
		}
		r, err := d.recoverStart(id)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (d *Driver) recoverStart(id home.VMID) (Recovered, error) {
	unlock := d.lock(id)
	defer unlock()
	vm := d.home.VM(id)
	res := Recovered{ID: id}
	drop := func() (Recovered, error) {
		if err := os.Remove(vm.StartPending()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("recover the start of %s: %w", id, err)
		}
		return res, nil
	}
	if _, err := os.Stat(vm.QEMUJSON()); err == nil {
		return drop() // the start got as far as its record
	}
	rec, err := readPending(vm.StartPending())
	if errors.Is(err, errNoRecord) {
		return res, nil
	}
	if err != nil {
		// Not readable: nothing can be found by it. QEMU's own disk lock
		// still keeps a second QEMU off the disk, and the start says so.
		return drop()
	}
	now, err := d.boot()
	if err != nil {
		return res, fmt.Errorf("recover the start of %s: %w", id, err)
	}
	if !now.SameBoot(rec.Stamp) {
		return drop() // nothing of an earlier boot runs
	}
	pid, ticks, err := findQEMU(vm.QEMUName(), rec.GuestPort)
	if err != nil {
		return res, fmt.Errorf("recover the start of %s: %w", id, err)
	}
	if pid == 0 {
		return drop()
	}
	rec.PID, rec.ProcStartTicks = pid, ticks
	if err := writeRecord(vm.QEMUJSON(), rec); err != nil {
		return res, fmt.Errorf("recover the start of %s: adopt QEMU pid %d: %w", id, pid, err)
	}
	res.PID = pid
	return drop()
}

// findQEMU looks among this user's processes for the QEMU whose argv names
// the VM (-name NAME) and its guest port (the hostfwd rule): both together
// are one start's, since a port is picked free at each start. It returns its
// pid and start time, or 0 when none runs.
func findQEMU(name string, port int) (int, uint64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, fmt.Errorf("list the processes: %w", err)
	}
	wantName := []byte("\x00-name\x00" + name + "\x00")
	wantFwd := []byte("hostfwd=tcp:127.0.0.1:" + strconv.Itoa(port) + "-:1024")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		argv, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(argv, wantName) || !bytes.Contains(argv, wantFwd) {
			continue
		}
		info, err := readProc(pid)
		if err != nil || !info.Exists || info.UID != os.Getuid() {
			continue
		}
		return pid, info.StartTicks, nil
	}
	return 0, 0, nil
}
