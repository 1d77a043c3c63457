//go:build linux

package procfs // import "github.com/workerwatch/workerwatch/internal/procfs"

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// BootTime is the host's boot time from the btime line of <root>/stat, in
// whole seconds (the kernel's own precision): a process's start time
// (Stat.Starttime, ticks since boot) plus it is when the process started.
func (r *Reader) BootTime() (time.Time, error) {
	b, err := os.ReadFile(r.root + "/stat")
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || sec <= 0 {
				return time.Time{}, fmt.Errorf("%s/stat: bad btime %q", r.root, v)
			}
			return time.Unix(sec, 0).UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s/stat: no btime line", r.root)
}

// StartTime is when a process started: the boot time plus its start time
// in ticks.
func StartTime(boot time.Time, starttime uint64) time.Time {
	return boot.Add(time.Duration(starttime) * (time.Second / UserHZ))
}
