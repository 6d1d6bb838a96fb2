package heartbeat

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is what the kernel says of this machine's processors, memory and
// the filesystem of a directory.
type Machine struct {
	CPUs         int32
	MemTotal     int64
	MemAvailable int64
	DiskTotal    int64
	DiskFree     int64
}

// ReadMachine reads /proc/meminfo and statfs(dir).
func ReadMachine(dir string) (Machine, error) {
	m := Machine{CPUs: int32(runtime.NumCPU())}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return m, fmt.Errorf("read the memory size: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "MemTotal:       24573816 kB"
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "MemTotal":
			m.MemTotal = kb << 10
		case "MemAvailable":
			m.MemAvailable = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("read /proc/meminfo: %w", err)
	}
	if m.MemTotal == 0 {
		return m, fmt.Errorf("/proc/meminfo has no MemTotal")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return m, fmt.Errorf("read the free space of %s: %w", dir, err)
	}
	m.DiskTotal = int64(st.Blocks) * st.Bsize
	m.DiskFree = int64(st.Bavail) * st.Bsize
	return m, nil
}
