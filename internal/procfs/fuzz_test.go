//go:build linux

package procfs

// Fuzz tests of the /proc and cgroup parsers. The kernel writes these files,
// but a container's proc_root, a fixture tree or a hostile process name (comm
// and cmdline are chosen by the process) reach the same parsers, so they must
// never panic, never allocate per call on the hot path, and never turn a
// corrupt number into a negative count or a different pid.
//
// Plain `go test` replays the seeds below and testdata/fuzz/<FuzzName>/;
// `go test -run '^$' -fuzz FuzzParseStat -fuzztime 2m .` explores further.

import (
	"math"
	"path"
	"strconv"
	"strings"
	"testing"
)

const realStat = "1234 (node) S 1 1234 1234 0 -1 4194560 28341 1802 0 0 512 87 3 1 20 0 11 0 431234 1184296960 23712 18446744073709551615 1 1 0 0 0 0 0 16781312 17922 0 0 0 17 1 0 0 0 0 0\n"

func FuzzParseStat(f *testing.F) {
	for _, s := range []string{
		realStat,
		"1 (a) b) c) R 0 0 0 0 0 0 0 0 0 0 1 2 3 4 0 0 1 0 5 0 7\n",        // ')' in comm
		"7 (my worker (v2)) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0 3", // spaces and parentheses in comm
		"9 ()) S 1",    // truncated after comm
		"9 (x",         // no closing ')'
		"9 x) S 1 2 3", // no opening '('
		"",             // empty
		"9 (\x00\xff\xfe) Z 1 1 1 0 -1 0 0 0 0 0 -5 -6 -7 -8 0 0 -1 0 -9 0 -10", // NUL, invalid UTF-8, negatives
		// huge
		"9 (x) S 99999999999999999999999 1 1 0 -1 99999999999999999999 0 0 0 0 99999999999999999999 99999999999999999999 0 0 0 0 99999999999999999999 0 99999999999999999999 0 99999999999999999999\n",
		// very long comm
		"9 (" + strings.Repeat("A", 4096) + ") S 1 1 1 0 -1 0 0 0 0 0 1 1 1 1 0 0 1 0 1 0 1",
		"9 (x) S 1 1 1 0 -1 0 0 0 0 0 1 1 1 1 0 0 1 0 1 0", // one field short
		"9 (x)  S  1",        // double spaces
		"9 (x) S\n1\n1\n1\n", // newlines as separators
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var st Stat
		ok := ParseStat(b, &st)
		if !ok {
			return
		}
		if st.CommLen < 0 || st.CommLen > len(st.Comm) {
			t.Fatalf("commLen %d", st.CommLen)
		}
		if st.PPID < 0 || st.Pgrp < 0 || st.Session < 0 || st.NumThreads < 0 || st.RSSPages < 0 {
			t.Fatalf("negative value: ppid %d pgrp %d session %d threads %d rss %d", st.PPID, st.Pgrp, st.Session, st.NumThreads, st.RSSPages)
		}
		if st.RSSPages > math.MaxInt64/PageSize {
			t.Fatalf("rss pages %d overflow bytes", st.RSSPages)
		}
		for _, v := range []uint64{st.Flags, st.Minflt, st.Cminflt, st.Utime, st.Stime, st.Cutime, st.Cstime, st.Starttime} {
			if v > math.MaxInt64 {
				t.Fatalf("a negative number became %d", v)
			}
		}
		// The hot path allocates nothing, whatever the input.
		if n := testing.AllocsPerRun(1, func() { ParseStat(b, &st) }); n != 0 {
			t.Fatalf("parseStat allocated %v times", n)
		}
	})
}

func FuzzParsePidList(f *testing.F) {
	for _, s := range []string{
		"4242 4243 4244\n", // children
		"1\n2\n3\n",        // cgroup.procs
		"4294967297\n",     // wraps to 1 as an int32: must not name init
		"2147483648 2147483647 0 -1 +5 007",
		"99999999999999999999999999999",
		"12\x0034 5\xff6 \t7\r\n",
		"", " ", "\n\n\n",
		strings.Repeat("9", 10000),
		strings.Repeat("1 ", 5000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out := ParsePidList(b, nil)
		// A pid needs a digit and a separator: the output is bounded by the input.
		if len(out) > (len(b)+1)/2 {
			t.Fatalf("%d pids from %d bytes", len(out), len(b))
		}
		for _, p := range out {
			if p <= 0 {
				t.Fatalf("pid %d", p)
			}
		}
		// Every pid is written exactly as in the file (no wrapping).
		fields := strings.Fields(string(b))
		j := 0
		for _, p := range out {
			for j < len(fields) && fields[j] != pidString(p) && strings.TrimLeft(fields[j], "0") != pidString(p) {
				j++
			}
			if j == len(fields) {
				t.Fatalf("pid %d is not a field of %q", p, b)
			}
			j++
		}
		if p := ParsePIDFile(b); p < 0 || (p > 0 && !strings.Contains(string(b), pidString(p))) {
			t.Fatalf("pid file %q parsed as %d", b, p)
		}
		buf := make([]int32, 0, len(b))
		if n := testing.AllocsPerRun(1, func() { buf = ParsePidList(b, buf[:0]) }); n != 0 {
			t.Fatalf("parsePidList allocated %v times", n)
		}
	})
}

func pidString(p int32) string { return strconv.Itoa(int(p)) }

// FuzzKeyValueFiles covers /proc/<pid>/status, smaps_rollup and
// memory.events: the key to look up is fuzzed too.
func FuzzKeyValueFiles(f *testing.F) {
	f.Add([]byte("Name:\tnode\nThreads:\t11\nCpus_allowed_list:\t0-3,8,10-11\n"), "Cpus_allowed_list")
	f.Add([]byte("Rss:  23712 kB\nPss:   11856 kB\n"), "Pss:")
	f.Add([]byte("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n"), "oom_kill")
	f.Add([]byte("oom_kill -5\n"), "oom_kill")
	f.Add([]byte("Pss: 99999999999999999999 kB"), "Pss:")
	f.Add([]byte("Cpus_allowed_list:\t0-4294967295,0-9223372036854775807"), "Cpus_allowed_list")
	f.Add([]byte("Cpus_allowed_list:\t5-3,-,--,,,7-"), "Cpus_allowed_list")
	f.Add([]byte("Cpus_allowed_list"), "Cpus_allowed_list") // key without value
	f.Add([]byte("oom_kill"), "oom_kill")
	f.Add([]byte("\x00\xff:\t1\n"), "\x00\xff")
	f.Add([]byte(""), "")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		if v, ok := statusLine(b, key); ok {
			if n := countCPUList(v); n < 0 || n > maxCPUs {
				t.Fatalf("cpu count %d", n)
			}
		}
		if n := countCPUList(b); n < 0 || n > maxCPUs {
			t.Fatalf("cpu count %d", n)
		}
		if v, ok := FieldKB(b, key); ok && v < 0 {
			t.Fatalf("%s %d", key, v)
		}
		if v, ok := spaceField(b, key); ok && v < 0 {
			t.Fatalf("%s %d", key, v)
		}
		if n := testing.AllocsPerRun(1, func() {
			statusLine(b, key)
			FieldKB(b, key)
			spaceField(b, key)
			countCPUList(b)
		}); n != 0 {
			t.Fatalf("allocated %v times", n)
		}
	})
}

// FuzzCgroupFiles covers memory.current, memory.max, cpu.max and the "0::"
// line of /proc/<pid>/cgroup.
func FuzzCgroupFiles(f *testing.F) {
	for _, s := range []string{
		"536870912\n", "max\n", "max 100000\n", "50000 100000\n", "200000 100000",
		"0::/system.slice/worker@1.service\n",
		"12:memory:/docker/abc\n0::/\n",
		"0::/../../etc\n", "0::relative\n", "0::/a//b\n", "0::/a/\x00/b",
		"-1\n", "99999999999999999999\n", "0 0", "1 -1", "1 2 3", "\xff\xfe",
		"", "\n", "0::",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, ok := parseCgroupBytes(b); ok && v < 0 {
			t.Fatalf("memory %d", v)
		}
		if q, p, ok := parseCPUMax(b); ok && (q <= 0 || p <= 0) {
			t.Fatalf("cpu.max %d %d", q, p)
		}
		if rel := cgroupV2Path(b); rel != "" {
			if rel[0] != '/' || path.Clean(rel) != rel || strings.Contains(rel+"/", "/../") {
				t.Fatalf("cgroup path %q escapes the root", rel)
			}
		}
	})
}

// FuzzEnviron: only the named variable's value ever leaves the environ
// buffer, and it is exactly what follows NAME= in one entry.
func FuzzEnviron(f *testing.F) {
	f.Add([]byte("PATH=/bin\x00WORKER_NAME=w-1\x00SECRET_TOKEN=hunter2\x00"), "WORKER_NAME")
	f.Add([]byte("SECRET_TOKEN=hunter2\x00WORKER_NAME"), "WORKER_NAME") // no '='
	f.Add([]byte("WORKER_NAME=\x00"), "WORKER_NAME")                    // empty value
	f.Add([]byte("WORKER_NAME=a=b=c"), "WORKER_NAME")                   // no trailing NUL
	f.Add([]byte("XWORKER_NAME=no\x00WORKER_NAMEX=no"), "WORKER_NAME")
	f.Add([]byte("=x\x00"), "")
	f.Add([]byte("\xff\xfe=\xff\x00"), "\xff\xfe")
	f.Add([]byte(strings.Repeat("A=", 3000)), "A")
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		v, ok := envValue(b, name)
		if !ok {
			if v != "" {
				t.Fatalf("value %q without ok", v)
			}
			return
		}
		if name == "" || strings.ContainsRune(v, 0) {
			t.Fatalf("name %q value %q", name, v)
		}
		entry := name + "=" + v
		found := false
		for _, kv := range strings.Split(string(b), "\x00") {
			if kv == entry {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("value %q of %q is not an entry of %q", v, name, b)
		}
	})
}
