package port

import "syscall"

// sysProcAttr ends the program with the server, even one that was killed
// and could not stop it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
