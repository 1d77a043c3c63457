//go:build linux

// Command workersim is a simulated fleet of job workers for workerwatch's
// demos, end-to-end tests and benchmarks: a scheduler and N workers as real
// OS processes that fork real children allocating real memory, and emit OTLP
// through the OpenTelemetry Go SDK. See docs/simulator.md.
//
//	workersim fleet [flags]             supervisor: one scheduler + N workers
//	workersim scheduler [flags]         the run queue and its HTTP API
//	workersim worker --id ID [flags]    one worker
//	workersim run-child --run-id R ...  one run's process (forked by a worker)
package main

import (
	"fmt"
	"os"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/fleet"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/runchild"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/scheduler"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/worker"
)

const usage = `usage: workersim <command> [flags]

commands:
  fleet       start a scheduler and N workers and supervise them
  scheduler   serve the run queue to workers
  worker      claim and execute runs (--id ID)
  run-child   one run's process: allocate, touch and hold memory

"workersim <command> -h" lists a command's flags; docs/simulator.md explains them.
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return cli.ExitUsage
	}
	cmds := map[string]func([]string) int{
		"fleet":     fleet.Main,
		"scheduler": scheduler.Main,
		"worker":    worker.Main,
		"run-child": runchild.Main,
	}
	if f, ok := cmds[args[0]]; ok {
		return f(args[1:])
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return cli.ExitOK
	}
	fmt.Fprintf(os.Stderr, "workersim: unknown command %q (want fleet, scheduler, worker or run-child)\n", args[0])
	return cli.ExitUsage
}
