//go:build !linux

package redistest

import "syscall"

// procAttr: no parent-death signal outside Linux; the cleanups stop the
// server.
func procAttr() *syscall.SysProcAttr { return nil }
