//go:build !linux

package consultest

import "syscall"

// sysProcAttr puts Consul in its own process group, so Stop can signal
// everything it started.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
