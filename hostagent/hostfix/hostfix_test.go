package hostfix

import "testing"

// TestForQEMULog: QEMU's words for each cause of the host name its fix, the
// more particular cause first; a log that names none names no fix.
func TestForQEMULog(t *testing.T) {
	for _, c := range []struct {
		log  string
		want Fix
		ok   bool
	}{
		{"Could not access KVM kernel module: No such file or directory\nqemu-system-x86_64: failed to initialize kvm: No such file or directory", KVMModule, true},
		{"Could not access KVM kernel module: Permission denied\nqemu-system-x86_64: failed to initialize kvm: Permission denied", KVMGroup, true},
		{"qemu-system-x86_64: error: failed to set MSR 0x10a to 0x2000000e1\nqemu-system-x86_64: ../target/i386/kvm/kvm.c:2893: kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed.", RecordCPUModel, true},
		{"ioctl(KVM_CREATE_VM) failed: 16 Device or resource busy\nqemu-system-x86_64: failed to initialize kvm: Device or resource busy", KVMRuns, true},
		{"qemu-system-x86_64: -drive file=x: Could not open 'x': No such file or directory", Fix{}, false},
		{"", Fix{}, false},
	} {
		got, ok := ForQEMULog(c.log)
		if got != c.want || ok != c.ok {
			t.Errorf("ForQEMULog(%q) = %v, %v; want %v, %v", c.log, got, ok, c.want, c.ok)
		}
	}
	if s := KVMGroup.String(); s != "fix: sudo usermod -aG kvm $USER ("+KVMGroup.Why+")" {
		t.Errorf("String() = %q", s)
	}
}
