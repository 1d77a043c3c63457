//go:build !windows

package bullmqreceiver

import (
	"syscall"
	"time"
)

// cpuTime is this process's user + system CPU time so far (getrusage).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
