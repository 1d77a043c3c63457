// Package procfs reads the few /proc facts the simulator needs: a process's
// resident memory and its direct children.
package procfs

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

var pageSize = int64(os.Getpagesize())

// RSS returns the resident set size of pid in bytes, from /proc/<pid>/statm
// (second field, in pages): cheap enough to poll every 100 ms.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, os.ErrInvalid
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, err
	}
	return pages * pageSize, nil
}

// Children returns the pids of pid's direct children, read from every
// thread's children file (a child belongs to the thread that forked it).
func Children(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// Pids lists the processes of the host.
func Pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range ents {
		if pid, err := strconv.Atoi(d.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Cmdline returns pid's argv, nil if the process is gone.
func Cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// Alive reports whether pid exists and is not a zombie (a zombie has exited,
// it only waits to be reaped).
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the LAST ')' (comm may contain one).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st != 'Z' && st != 'X'
}
