//go:build !linux

// Command workersim is a simulated fleet of job workers for workerwatch. It
// forks real process trees and reads them back from /proc, so it runs on
// Linux only; elsewhere it says so.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "workersim runs on Linux only (it forks real process trees and reads /proc); this is %s\n", runtime.GOOS)
	os.Exit(2)
}
