//go:build linux

package redistest

import "syscall"

// procAttr makes the kernel kill redis-server when the test binary dies
// without its cleanups (a -timeout panic, a crash): no server is left
// listening on the shared machine.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
