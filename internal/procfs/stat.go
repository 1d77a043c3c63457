//go:build linux

package procfs // import "github.com/workerwatch/workerwatch/internal/procfs"

import (
	"bytes"
	"math"
)

// pfKthread is PF_KTHREAD in the flags field of /proc/<pid>/stat.
const pfKthread = 0x00200000

// Stat is what workerwatch needs from /proc/<pid>/stat (fields numbered as
// in proc(5)).
type Stat struct {
	State      byte   // 3: R, S, D, Z (zombie), X (dead), ...
	PPID       int32  // 4
	Pgrp       int32  // 5: process group
	Session    int32  // 6
	Flags      uint64 // 9: PF_* flags
	Minflt     uint64 // 10
	Cminflt    uint64 // 11: page faults of reaped children
	Utime      uint64 // 14: ticks (UserHZ)
	Stime      uint64 // 15
	Cutime     uint64 // 16: ticks of reaped children (their own c-times included)
	Cstime     uint64 // 17
	NumThreads int64  // 20
	Starttime  uint64 // 22: ticks after boot: with the pid, a process's identity
	RSSPages   int64  // 24: resident pages (as statm's second field)
	Comm       [16]byte
	CommLen    int // TASK_COMM_LEN is 16 including the NUL
}

// CommString is the executable name (comm, at most 15 bytes).
func (s *Stat) CommString() string { return string(s.Comm[:s.CommLen]) }

// KernelThread reports a kernel thread (never a member of a worker).
func (s *Stat) KernelThread() bool { return s.Flags&pfKthread != 0 }

// Exited reports a process that has exited and waits to be reaped (zombie)
// or is being torn down.
func (s *Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// RSSBytes is the resident set size in bytes.
func (s *Stat) RSSBytes() int64 { return s.RSSPages * PageSize }

// CPUSeconds is the process's own user + system CPU time in seconds.
func (s *Stat) CPUSeconds() float64 { return float64(s.Utime+s.Stime) / UserHZ }

// ParseStat parses the content of /proc/<pid>/stat. comm may contain spaces
// and ')', so it runs from the first '(' to the LAST ')'. It allocates
// nothing and never yields a negative count.
func ParseStat(b []byte, st *Stat) bool {
	open := bytes.IndexByte(b, '(')
	if open < 0 {
		return false
	}
	closing := bytes.LastIndexByte(b, ')')
	if closing <= open || closing+2 >= len(b) {
		return false
	}
	st.CommLen = copy(st.Comm[:], b[open+1:closing])
	// Fields after ") " are numbered from 3 (state) as in proc(5).
	rest := b[closing+2:]
	field := 3
	i := 0
	for i < len(rest) && field <= 24 {
		j := i
		for j < len(rest) && rest[j] != ' ' && rest[j] != '\n' {
			j++
		}
		tok := rest[i:j]
		switch field {
		case 3:
			if len(tok) > 0 {
				st.State = tok[0]
			}
		case 4:
			st.PPID = int32(min(parseCount(tok), math.MaxInt32))
		case 5:
			st.Pgrp = int32(min(parseCount(tok), math.MaxInt32))
		case 6:
			st.Session = int32(min(parseCount(tok), math.MaxInt32))
		case 9:
			st.Flags = uint64(parseCount(tok))
		case 10:
			st.Minflt = uint64(parseCount(tok))
		case 11:
			st.Cminflt = uint64(parseCount(tok))
		case 14:
			st.Utime = uint64(parseCount(tok))
		case 15:
			st.Stime = uint64(parseCount(tok))
		case 16:
			st.Cutime = uint64(parseCount(tok))
		case 17:
			st.Cstime = uint64(parseCount(tok))
		case 20:
			st.NumThreads = parseCount(tok)
		case 22:
			st.Starttime = uint64(parseCount(tok))
		case 24:
			// In pages: bounded so that RSSPages*PageSize cannot overflow.
			st.RSSPages = min(parseCount(tok), math.MaxInt64/PageSize)
		}
		field++
		i = j + 1
	}
	return field > 24
}
