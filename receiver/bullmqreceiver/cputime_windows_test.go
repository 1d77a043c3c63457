//go:build windows

package bullmqreceiver

import (
	"syscall"
	"time"
)

// cpuTime is this process's user + kernel CPU time so far
// (GetProcessTimes; Windows has no getrusage).
func cpuTime() time.Duration {
	h, err := syscall.GetCurrentProcess()
	if err != nil {
		return 0
	}
	var created, exited, kernel, user syscall.Filetime
	if syscall.GetProcessTimes(h, &created, &exited, &kernel, &user) != nil {
		return 0
	}
	// FILETIME durations count 100 ns intervals.
	ticks := func(f syscall.Filetime) int64 { return int64(f.HighDateTime)<<32 | int64(f.LowDateTime) }
	return time.Duration((ticks(kernel) + ticks(user)) * 100)
}
