// Package runchild is `workersim run-child`: the process a worker forks per
// run. It allocates real memory, writes every page so the resident set
// really grows, holds it for the run's duration and exits 0.
package runchild

import (
	"os"
	"runtime"
	"time"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
)

// rampSteps spreads the touching over a short ramp so a memory watcher sees
// the run grow (and a limit crossed part-way) rather than one jump.
const rampSteps = 8

// Main runs `workersim run-child --run-id R --memory BYTES --duration D`.
func Main(args []string) int {
	const name = "run-child"
	fs := cli.NewFlagSet(name)
	runID := fs.String("run-id", "", "the run this process executes (shown in its command line)")
	mem := cli.Bytes(0)
	fs.Var(&mem, "memory", "bytes to allocate and touch")
	dur := fs.Duration("duration", time.Second, "how long to hold the memory")
	if code, ok := cli.Parse(fs, args); !ok {
		return code
	}
	if *runID == "" {
		cli.Failf(name, "--run-id is required")
		return cli.ExitUsage
	}
	if *dur < 0 {
		cli.Failf(name, "--duration must be >= 0, got %s", *dur)
		return cli.ExitUsage
	}
	start := time.Now()
	buf := make([]byte, int64(mem))
	ramp := min(*dur/4, 500*time.Millisecond)
	page := os.Getpagesize()
	step := (len(buf) + rampSteps - 1) / rampSteps
	for i := 0; i < rampSteps && step > 0; i++ {
		end := min(len(buf), (i+1)*step)
		for j := i * step; j < end; j += page {
			buf[j] = byte(j)
		}
		time.Sleep(ramp / rampSteps)
	}
	time.Sleep(time.Until(start.Add(*dur)))
	// Keep the buffer live until the end: the point is to hold the memory.
	runtime.KeepAlive(buf)
	return cli.ExitOK
}
