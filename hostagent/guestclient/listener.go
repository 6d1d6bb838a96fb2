package guestclient

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The listener rule. A port on record is not enough, and the proof alone is
// not either: a process that took the port after its QEMU stopped, and
// that can reach another dot-agentd holding the same token, can relay the
// nonce and pass the proof. So before the proof, on the connection just
// made, the host checks that every socket listening on the port belongs to
// the process the host started for this VM: the pid on record, alive, of
// this host's user, with its start time and on the boot the record was
// written in (the identity the kill rule of ref 3.4 proves in
// hostagent/qemu). A target without its start time or boot id is refused,
// never proved with less: a pid alone is handed on by the kernel, and
// after a host restart names any process. Anything else is
// ErrGuestUnproven, and the nonce is never sent.

// procRoot is where the kernel's process and network tables are read.
var procRoot = "/proc"

// checkListener applies the listener rule to t.
func checkListener(t Target) error {
	if t.PID <= 0 {
		return fmt.Errorf("%w: no QEMU process on record for port %d", ErrGuestUnproven, t.Port)
	}
	if t.StartTicks == 0 || t.BootID == "" {
		return fmt.Errorf("%w: the record of port %d does not give the QEMU's start time and boot id, so its listener cannot be proven", ErrGuestUnproven, t.Port)
	}
	b, err := os.ReadFile(procRoot + "/sys/kernel/random/boot_id")
	if err != nil {
		return fmt.Errorf("%w: read the host's boot id: %v", ErrGuestUnproven, err)
	}
	if strings.TrimSpace(string(b)) != t.BootID {
		return fmt.Errorf("%w: the record of port %d was written before the host restarted", ErrGuestUnproven, t.Port)
	}
	start, uid, err := processOf(t.PID)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrGuestUnproven, err)
	}
	if start != t.StartTicks {
		return fmt.Errorf("%w: process %d is not the QEMU on record (it started at tick %d, not %d)", ErrGuestUnproven, t.PID, start, t.StartTicks)
	}
	if uid != os.Getuid() {
		return fmt.Errorf("%w: process %d belongs to uid %d, not to this host's uid %d", ErrGuestUnproven, t.PID, uid, os.Getuid())
	}
	inodes, err := listeningInodes(t.Port)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrGuestUnproven, err)
	}
	if len(inodes) == 0 {
		return fmt.Errorf("%w: nothing listens on port %d", ErrGuestUnproven, t.Port)
	}
	held, err := socketInodes(t.PID)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrGuestUnproven, err)
	}
	for _, ino := range inodes {
		if !held[ino] {
			return fmt.Errorf("%w: a socket listening on port %d is not the QEMU's (pid %d): another process holds the port", ErrGuestUnproven, t.Port, t.PID)
		}
	}
	return nil
}

// processOf reads a live process's start time (clock ticks since boot,
// /proc/<pid>/stat field 22) and owner.
func processOf(pid int) (uint64, int, error) {
	dir := procRoot + "/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("process %d is not running: %v", pid, err)
	}
	start, err := parseStat(b)
	if err != nil {
		return 0, 0, fmt.Errorf("process %d: %v", pid, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("process %d is not running: %v", pid, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("process %d: no owner", pid)
	}
	return start, int(st.Uid), nil
}

// parseStat reads the start time of /proc/<pid>/stat; a zombie is no
// process. The command name (field 2) may hold spaces and parentheses: the
// fields after it start after the last ')'.
func parseStat(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat does not parse")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("stat has %d fields after the name, want at least 20", len(f))
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, errors.New("the process has exited")
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat start time %q: %v", f[19], err)
	}
	return start, nil
}

// listeningInodes lists the inodes of the TCP sockets listening on port at
// an address a connection to 127.0.0.1 can reach (127.0.0.1, any IPv4
// address, or an IPv6 one mapped or unspecified).
func listeningInodes(port int) ([]uint64, error) {
	var out []uint64
	for _, table := range []string{"/net/tcp", "/net/tcp6"} {
		f, err := os.Open(procRoot + table)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return nil, fmt.Errorf("read the sockets: %v", err)
		}
		got, err := parseListeners(bufio.NewScanner(f), port)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %v", table, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// parseListeners reads a /proc/net/tcp or tcp6 table: the inodes of the
// sockets in LISTEN on port at an address that covers 127.0.0.1.
func parseListeners(sc *bufio.Scanner, port int) ([]uint64, error) {
	var out []uint64
	first := true
	for sc.Scan() {
		if first {
			first = false // the header
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != tcpListen {
			continue
		}
		addr, portHex, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("local address %q does not parse", f[1])
		}
		p, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("local port %q does not parse", portHex)
		}
		if int(p) != port || !coversLoopback(addr) {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("inode %q does not parse", f[9])
		}
		out = append(out, ino)
	}
	return out, sc.Err()
}

// coversLoopback says whether a listening address of /proc/net/tcp{,6}
// (hex, in the kernel's word order) takes connections to 127.0.0.1.
func coversLoopback(hexAddr string) bool {
	b, err := hex.DecodeString(hexAddr)
	if err != nil {
		return false
	}
	switch len(b) {
	case 4:
		// 127.0.0.1 is 0100007F on a little-endian host, 7F000001 on a
		// big-endian one; 0.0.0.0 takes every address.
		return hexAddr == "00000000" || hexAddr == "0100007F" || hexAddr == "7F000001"
	case 16:
		// :: (dual stack) or ::ffff:127.0.0.1, in 32-bit words.
		return hexAddr == strings.Repeat("0", 32) ||
			hexAddr == "0000000000000000FFFF00000100007F" || hexAddr == "00000000000000000000FFFF7F000001"
	}
	return false
}

// socketInodes is the set of socket inodes pid holds open.
func socketInodes(pid int) (map[uint64]bool, error) {
	dir := procRoot + "/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the descriptors of process %d: %v", pid, err)
	}
	out := map[uint64]bool{}
	for _, e := range entries {
		link, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		if s, ok := strings.CutPrefix(link, "socket:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				out[ino] = true
			}
		}
	}
	return out, nil
}
