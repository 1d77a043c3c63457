// Package procfs is workerwatch's one reader of Linux's /proc (and of the
// cgroup v2 files next to it): the worker_process receiver's hot path, and
// small helpers on top of it for the simulator and the tests.
//
// The hot path reads a handful of small files for every process of every
// worker on every scrape. It is written by hand instead of with
// github.com/prometheus/procfs because that library allocates on every read
// (a new path string, an os.File, an io.ReadAll buffer, strings for every
// field, a ProcStat struct): measured with BenchmarkReadProcess
// (readcost_test.go), procfs.Proc + Stat costs about 36 allocations and 2-3x
// the CPU of Reader.ReadStat for one stat file. A Reader owns reused
// buffers, builds NUL-terminated paths in place, calls
// openat/read/getdents64 directly and parses bytes, so reading a process in
// steady state allocates nothing; files can also be held open between reads
// (held.go), which makes reading a process about twice as cheap again.
//
// Linux only: on other systems the package is empty (this file has no build
// constraint so that the package exists everywhere).
package procfs // import "github.com/workerwatch/workerwatch/internal/procfs"
