package bench

import "syscall"

// dieWithParent makes a replica die with the bench, even a bench killed
// with SIGKILL, which runs no deferred stop: a replica left behind would
// keep serving on its port.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
