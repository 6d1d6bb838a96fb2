// Package hostfix names, once, the commands that fix what keeps a host from
// running Dots, with the words beside each: the doctor's rows show them, and
// a QEMU start that fails for one of these causes names the same command in
// the Computer's condition and Event (ref 3.4: "the start fails and the
// error names the fix").
package hostfix

import (
	"strings"

	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
)

// Fix is a command a person runs and what it does.
type Fix struct {
	// Cmd is the command, on a line of its own so it is copied as it is.
	Cmd string
	// Why says what it does and when it applies.
	Why string
}

// The fixes of the accelerator and the CPU model.
var (
	KVMGroup = Fix{"sudo usermod -aG kvm $USER",
		"adds you to the kvm group, which may open /dev/kvm; log out and in again for it to apply (invisible-dots setup says the same)"}
	KVMModule = Fix{"sudo modprobe kvm_intel || sudo modprobe kvm_amd",
		"loads KVM for an Intel or an AMD processor; when neither loads, enable virtualization (VT-x or AMD-V) in the firmware's settings first"}
	KVMRuns = Fix{"lsmod | grep -E 'kvm|vbox|vmw'",
		"shows the KVM modules loaded, and another hypervisor's (VirtualBox, VMware) that may hold VT-x: KVM must run guests here (nested virtualization enabled on a VM host, no other hypervisor running, virtualization enabled in the firmware)"}
	RecordCPUModel = Fix{"invisible-dots setup",
		"records cpuModel " + hostconfig.CPUModelNoArchCapabilities + " in host.yaml, the model the probe runs here"}
	Doctor = Fix{"invisible-dots doctor",
		"checks QEMU, the accelerator, the CPU model and the images of this host, each row that fails with its own fix"}
)

// causes are what QEMU's own log says when it cannot start a guest for a
// reason of the host, matched in order: the first that matches names the
// fix. The words are QEMU 7.2's (Debian 12), measured where a host here
// fails that way.
var causes = []struct {
	says string // in QEMU's log of the start
	fix  Fix
}{
	// /dev/kvm is missing: the module is not loaded (or the firmware has
	// virtualization off).
	{"failed to initialize kvm: No such file or directory", KVMModule},
	{"Could not access KVM kernel module: No such file or directory", KVMModule},
	// /dev/kvm is there but this user may not open it.
	{"failed to initialize kvm: Permission denied", KVMGroup},
	{"Could not access KVM kernel module: Permission denied", KVMGroup},
	// Nested virtualization refuses the default model's arch capabilities
	// (DESIGN 5); setup probes and records the model that runs.
	{"failed to set MSR 0x10a", RecordCPUModel},
	// KVM opened but cannot run a guest: another hypervisor holds VT-x, or
	// the host is a VM without nested virtualization.
	{"failed to initialize kvm", KVMRuns},
	{"KVM_CREATE_VM", KVMRuns},
}

// ForQEMULog returns the fix of a QEMU start whose log (of that start only)
// is log, and whether its words name a cause this package knows.
func ForQEMULog(log string) (Fix, bool) {
	for _, c := range causes {
		if strings.Contains(log, c.says) {
			return c.fix, true
		}
	}
	return Fix{}, false
}

// String is the fix as a sentence that follows an error: "fix: CMD (WHY)".
func (f Fix) String() string {
	if f.Cmd == "" {
		return ""
	}
	return "fix: " + f.Cmd + " (" + f.Why + ")"
}
