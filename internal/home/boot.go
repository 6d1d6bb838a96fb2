package home

// Which boot of the host this is: the kernel's boot id and the host's uptime.
// Every record that names a process (server.lock, qemu.json, the build locks)
// carries both, so a record written before the host restarted is recognised as
// stale without trusting its pid, which the kernel may have handed to another
// process since (ref 3.2).

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stamp is what a record stores about the boot it was written in. Embed it in
// a record's JSON so the field names are the same everywhere.
type Stamp struct {
	// BootID is /proc/sys/kernel/random/boot_id: a new random UUID at every
	// boot. Empty when the host has none (then uptime alone decides).
	BootID string `json:"boot_id,omitempty"`
	// HostUptimeS is the host's uptime in seconds when the record was written.
	// It only grows within one boot and starts from zero at the next.
	HostUptimeS float64 `json:"host_uptime_s"`
}

// BootSource returns the current stamp. Tests inject a fixed one to fake a
// reboot.
type BootSource func() (Stamp, error)

// Linux files read by CurrentBoot.
const (
	bootIDPath = "/proc/sys/kernel/random/boot_id"
	uptimePath = "/proc/uptime"
)

// CurrentBoot reads the running host's boot id and uptime from /proc.
func CurrentBoot() (Stamp, error) {
	return readBoot(bootIDPath, uptimePath)
}

func readBoot(bootIDFile, uptimeFile string) (Stamp, error) {
	up, err := os.ReadFile(uptimeFile)
	if err != nil {
		return Stamp{}, fmt.Errorf("read host uptime: %w", err)
	}
	fields := strings.Fields(string(up))
	if len(fields) == 0 {
		return Stamp{}, fmt.Errorf("read host uptime: %s is empty", uptimeFile)
	}
	secs, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || secs < 0 {
		return Stamp{}, fmt.Errorf("read host uptime: %s does not start with a number of seconds: %q", uptimeFile, fields[0])
	}
	id, err := os.ReadFile(bootIDFile)
	if err != nil && !os.IsNotExist(err) {
		return Stamp{}, fmt.Errorf("read host boot id: %w", err)
	}
	return Stamp{BootID: string(bytes.TrimSpace(id)), HostUptimeS: secs}, nil
}

// SameBoot reports whether rec was written in the boot now describes. The
// boot id decides when both have one. Otherwise a record whose uptime is
// greater than the current one comes from an earlier boot (a record written
// later in a previous, longer boot would not be caught by uptime alone, which
// is why the boot id is stored too).
func (now Stamp) SameBoot(rec Stamp) bool {
	if now.BootID != "" && rec.BootID != "" {
		return now.BootID == rec.BootID
	}
	return rec.HostUptimeS <= now.HostUptimeS
}
