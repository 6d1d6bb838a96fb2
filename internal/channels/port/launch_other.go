//go:build !linux

package port

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
