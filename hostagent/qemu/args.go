package qemu

import (
	"strconv"
	"strings"
)

// machine is what qemuArgs needs to build one VM's command line.
type machine struct {
	Binary      string // absolute path of qemu-system-x86_64
	Name        string // -name, paths.VM.QEMUName
	Accelerator string // kvm or tcg
	CPUModel    string
	CPUs        int
	MemoryMiB   int64
	Disk        string // the overlay
	Seed        string // the NoCloud seed ISO
	Runtime     string // the runtime ISO
	GuestPort   int
	SerialLog   string
	// Kernel, Initrd and Append boot a golden image that has no boot loader
	// (the test image); empty for a full golden image.
	Kernel, Initrd, Append string
}

// qemuArgs is the ONE function that builds a VM's argv (ref 3.4). No monitor,
// no QMP, nothing that pauses: QEMU runs the guest at once and exits when the
// guest powers off, so the only ways to stop it are the guest's own poweroff
// and a kill.
func qemuArgs(m machine) []string {
	args := []string{
		m.Binary,
		"-name", m.Name,
		"-machine", "q35",
		"-accel", m.Accelerator,
		"-cpu", m.CPUModel,
		"-smp", strconv.Itoa(m.CPUs),
		"-m", strconv.FormatInt(m.MemoryMiB, 10),
		"-drive", "if=virtio,file=" + m.Disk + ",format=qcow2,discard=unmap",
		"-drive", "if=virtio,file=" + m.Seed + ",format=raw,readonly=on",
		"-drive", "if=virtio,file=" + m.Runtime + ",format=raw,readonly=on",
		"-netdev", "user,id=net0,hostfwd=tcp:127.0.0.1:" + strconv.Itoa(m.GuestPort) + "-:1024",
		"-device", "virtio-net-pci,netdev=net0",
		"-device", "virtio-rng-pci",
		"-serial", "file:" + m.SerialLog,
		"-display", "none",
	}
	if m.Kernel != "" {
		args = append(args, "-kernel", m.Kernel, "-initrd", m.Initrd)
		if m.Append != "" {
			args = append(args, "-append", m.Append)
		}
	}
	return args
}

// forbiddenFlags are the flags that would give QEMU a control channel or
// hold the guest before its first instruction (ref 3.4); a test fails on any.
var forbiddenFlags = []string{"-monitor", "-qmp", "-qmp-pretty", "-S", "-no-shutdown", "-chardev", "-mon", "-daemonize", "-pidfile"}

// hasForbiddenFlag returns the first forbidden flag in args, or "".
func hasForbiddenFlag(args []string) string {
	for _, a := range args {
		for _, f := range forbiddenFlags {
			if a == f || strings.HasPrefix(a, f+"=") || a == "-"+f {
				return a
			}
		}
	}
	return ""
}
