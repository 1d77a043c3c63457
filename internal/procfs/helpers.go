//go:build linux

package procfs // import "github.com/workerwatch/workerwatch/internal/procfs"

// Helpers for the simulator and the tests: the same reader as the receiver
// on the host's /proc, one call at a time, safe for concurrent use (each
// call borrows a Reader from a pool). They take and return ints, as os/exec
// does.

import (
	"bytes"
	"slices"
	"sync"
)

var readers = sync.Pool{New: func() any { return NewReader("/proc") }}

func getReader() *Reader  { return readers.Get().(*Reader) }
func putReader(r *Reader) { readers.Put(r) }

// StatOf reads /proc/<pid>/stat.
func StatOf(pid int) (Stat, error) {
	r := getReader()
	defer putReader(r)
	var st Stat
	err := r.ReadStat(int32(pid), &st)
	return st, err
}

// RSS returns the resident set size of pid in bytes (the rss of its stat,
// the same figure as statm's second field): cheap enough to poll every
// 100 ms.
func RSS(pid int) (int64, error) {
	st, err := StatOf(pid)
	if err != nil {
		return 0, err
	}
	return st.RSSBytes(), nil
}

// Alive reports whether pid exists and has not exited (a zombie has exited,
// it only waits to be reaped).
func Alive(pid int) bool {
	st, err := StatOf(pid)
	return err == nil && !st.Exited()
}

// Children returns the pids of pid's direct children, read from every
// thread's children file (a child belongs to the thread that forked it).
func Children(pid int) []int {
	r := getReader()
	defer putReader(r)
	tids, _ := r.Tids(int32(pid), nil)
	var kids []int32
	for _, t := range tids {
		kids, _ = r.Children(int32(pid), t, kids)
	}
	return ints(kids)
}

// Pids lists the processes of the host.
func Pids() []int {
	r := getReader()
	defer putReader(r)
	pids, _ := r.Pids(nil)
	return ints(pids)
}

// Cmdline returns pid's argv, nil if the process is gone (or a kernel
// thread, which has none).
func Cmdline(pid int) []string {
	r := getReader()
	defer putReader(r)
	b, err := r.rawCmdline(int32(pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	var argv []string
	for a := range bytes.SplitSeq(b, []byte{0}) {
		argv = append(argv, string(a))
	}
	return argv
}

func ints(pids []int32) []int {
	out := make([]int, 0, len(pids))
	for _, p := range pids {
		out = append(out, int(p))
	}
	slices.Sort(out)
	return out
}
