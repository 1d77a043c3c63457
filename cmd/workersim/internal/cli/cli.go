// Package cli holds what every workersim subcommand shares on its command
// line: flag sets that fail with ONE clear line, byte sizes, fault names and
// the exit codes.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit codes shared by all subcommands (docs/simulator.md).
const (
	ExitOK    = 0
	ExitError = 1 // a runtime failure (could not start, scheduler died)
	ExitUsage = 2 // bad flags or arguments
	// ExitRestart is what a worker returns on SIGUSR1: "restart me". The
	// supervisor restarts only workers that exit with it (sysexits EX_TEMPFAIL).
	ExitRestart = 75
)

// NewFlagSet returns a flag set that prints nothing on its own: Parse
// reports the problem as one line so a bad invocation is easy to read in a
// test log or a Makefile.
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// Parse parses args and, on failure, prints "workersim <cmd>: <problem>" and
// returns the exit code to use (ExitOK for -h, which prints the usage).
// ok is false when the caller must return code.
func Parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		PrintUsage(fs, os.Stdout)
		return ExitOK, false
	}
	if err != nil {
		Failf(fs.Name(), "%v", err)
		return ExitUsage, false
	}
	if fs.NArg() > 0 {
		Failf(fs.Name(), "unexpected argument %q", fs.Arg(0))
		return ExitUsage, false
	}
	return ExitOK, true
}

// PrintUsage writes every flag with its default.
func PrintUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "usage: workersim %s [flags]\n", fs.Name())
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// Failf prints one error line for subcommand cmd to stderr.
func Failf(cmd, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "workersim %s: %s\n", cmd, fmt.Sprintf(format, a...))
}

// Logf prints one greppable status line to stderr: "workersim: ...".
func Logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "workersim: %s\n", fmt.Sprintf(format, a...))
}
