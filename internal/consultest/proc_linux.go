package consultest

import "syscall"

// sysProcAttr puts Consul in its own process group, so Stop can signal
// everything it started, and has the kernel kill it if the test binary dies
// without running its cleanups (a panic or a -timeout abort).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
