//go:build linux

package procfs // import "github.com/workerwatch/workerwatch/internal/procfs"

// Byte parsers of /proc and cgroup files. The kernel writes these files, but
// a container's proc_root, a fixture tree or a hostile process name (comm
// and cmdline are chosen by the process) reach the same parsers, so they
// never panic, never allocate, and never turn a corrupt number into a
// negative count or a different pid (fuzz_test.go).

import (
	"bytes"
	"math"
	"path"
	"strings"
)

// parseInt parses a decimal integer with an optional sign; garbage yields
// the digits read so far. It saturates at ±math.MaxInt64 instead of wrapping
// (a corrupt or hostile file must not turn a huge number into a negative one).
func parseInt(b []byte) int64 {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg = true
		b = b[1:]
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			n = math.MaxInt64
			break
		}
		n = n*10 + d
	}
	if neg {
		return -n
	}
	return n
}

// parseCount parses a value that is never negative (a counter, a size, a
// tick count): a negative number yields 0.
func parseCount(b []byte) int64 { return max(parseInt(b), 0) }

// parsePid parses a directory name that is all digits, or returns -1.
func parsePid(b []byte) int32 {
	if len(b) == 0 || len(b) > 10 {
		return -1
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	if n > 1<<31-1 {
		return -1
	}
	return int32(n)
}

// ParsePidList appends the pids of a whitespace-separated list (a children
// file, cgroup.procs). Anything that is not a valid pid (0, out of int32
// range, not all digits) is skipped: a wrapped number must never name
// another process, such as pid 1.
func ParsePidList(b []byte, out []int32) []int32 {
	i := 0
	for i < len(b) {
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		j := i
		for j < len(b) && !isSpace(b[j]) {
			j++
		}
		if p := parsePid(b[i:j]); p > 0 {
			out = append(out, p)
		}
		i = j
	}
	return out
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// ParsePIDFile parses a pid file: one pid, surrounding whitespace allowed.
// It returns 0 for anything else.
func ParsePIDFile(b []byte) int32 {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return max(parsePid(b), 0)
}

// envValue returns the value of the variable name in the content of an
// environ file (NUL-separated NAME=value). Only that value is copied out of
// the buffer: no other variable of the process is kept anywhere (the buffer
// itself is overwritten by the next read).
func envValue(b []byte, name string) (string, bool) {
	if name == "" {
		return "", false
	}
	for len(b) > 0 {
		var kv []byte
		kv, b = cut(b, 0)
		if len(kv) > len(name) && kv[len(name)] == '=' && string(kv[:len(name)]) == name {
			return string(kv[len(name)+1:]), true
		}
	}
	return "", false
}

// cut splits b at the first sep: what comes before and what follows (nil
// when there is no sep).
func cut(b []byte, sep byte) (head, rest []byte) {
	if i := bytes.IndexByte(b, sep); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// FieldKB finds "<key> <n> kB" in a /proc key-value file (status,
// smaps_rollup, meminfo) and returns n*1024.
func FieldKB(b []byte, key string) (int64, bool) {
	for len(b) > 0 {
		var line []byte
		line, b = cut(b, '\n')
		if len(line) > len(key) && string(line[:len(key)]) == key {
			rest := line[len(key):]
			for len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t') {
				rest = rest[1:]
			}
			return min(parseCount(rest), math.MaxInt64/1024) * 1024, true
		}
	}
	return 0, false
}

// statusLine returns the value of a "Key:\tvalue" line of /proc/<pid>/status.
func statusLine(b []byte, key string) ([]byte, bool) {
	for len(b) > 0 {
		var line []byte
		line, b = cut(b, '\n')
		if len(line) > len(key) && string(line[:len(key)]) == key && line[len(key)] == ':' {
			v := line[len(key)+1:]
			for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
				v = v[1:]
			}
			return v, true
		}
	}
	return nil, false
}

// maxCPUs bounds a CPU count read from a file (the kernel's NR_CPUS is at
// most 8192): a corrupt list must not yield a huge or overflowing count.
const maxCPUs = 1 << 16

// countCPUList counts the CPUs in a list such as "0-3,8,10-11" (at most
// maxCPUs).
func countCPUList(b []byte) int {
	n := 0
	for len(b) > 0 {
		var part []byte
		part, b = cut(b, ',')
		dash := -1
		for k, c := range part {
			if c == '-' {
				dash = k
			}
		}
		if dash < 0 {
			if len(part) > 0 {
				n++
			}
		} else {
			lo, hi := parseCount(part[:dash]), parseCount(part[dash+1:])
			if hi >= lo && hi < maxCPUs {
				n += int(hi - lo + 1)
			}
		}
		if n >= maxCPUs {
			return maxCPUs
		}
	}
	return n
}

// spaceField finds a "key value" line (cgroup files such as memory.events);
// the value is a count, never negative.
func spaceField(b []byte, key string) (int64, bool) {
	for len(b) > 0 {
		var line []byte
		line, b = cut(b, '\n')
		if len(line) > len(key) && string(line[:len(key)]) == key && line[len(key)] == ' ' {
			return parseCount(line[len(key)+1:]), true
		}
	}
	return 0, false
}

// parseCgroupBytes parses memory.current or memory.max: a byte count, or
// "max" (no limit), which yields ok=false.
func parseCgroupBytes(b []byte) (int64, bool) {
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || b[0] < '0' || b[0] > '9' {
		return 0, false
	}
	return parseCount(b), true
}

// parseCPUMax parses cgroup v2 cpu.max ("$QUOTA $PERIOD" in microseconds,
// QUOTA may be "max"); ok=false when unlimited or malformed.
func parseCPUMax(b []byte) (quota, period int64, ok bool) {
	var f [3][]byte
	n := 0
	i := 0
	for i < len(b) && n < len(f) {
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		j := i
		for j < len(b) && !isSpace(b[j]) {
			j++
		}
		if j > i {
			f[n] = b[i:j]
			n++
		}
		i = j
	}
	if n != 2 || string(f[0]) == "max" {
		return 0, 0, false
	}
	q, p := parseInt(f[0]), parseInt(f[1])
	if q <= 0 || p <= 0 {
		return 0, 0, false
	}
	return q, p, true
}

// cgroupV2Path returns the cgroup v2 path of a /proc/<pid>/cgroup file (its
// "0::" line), or "" when there is none or it is not a clean absolute path
// (a path with ".." must not lead outside cgroup_root).
func cgroupV2Path(b []byte) string {
	rel := ""
	for len(b) > 0 {
		var line []byte
		line, b = cut(b, '\n')
		if len(line) >= 3 && string(line[:3]) == "0::" {
			rel = string(line[3:])
		}
	}
	if rel == "" || rel[0] != '/' || path.Clean(rel) != rel || strings.ContainsRune(rel, 0) {
		return ""
	}
	return rel
}
