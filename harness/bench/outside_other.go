//go:build !linux

package bench

import "syscall"

// dieWithParent: only Linux can tie a child's life to its parent's; a
// bench killed with SIGKILL elsewhere leaves its replicas running.
func dieWithParent() *syscall.SysProcAttr { return nil }
