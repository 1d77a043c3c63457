package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

// The hot path reads a handful of small /proc files for every process of every
// worker on every scrape. It is written by hand instead of with
// github.com/prometheus/procfs because procfs allocates on every read (a new
// path string, an os.File, an io.ReadAll buffer, strings for every field, a
// ProcStat struct): measured with BenchmarkReadProcess (readcost_test.go),
// procfs.Proc + Stat costs about 36 allocations and 2-3x the CPU of the
// reader below for one stat file. Here one reader owns
// reused buffers, builds NUL-terminated paths in place, calls
// openat/read/getdents64 directly and parses bytes, so reading a process in
// steady state allocates nothing.

import (
	"bytes"
	"errors"
	"math"
	"path"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// userHZ is the kernel's USER_HZ, the unit of the CPU times in /proc/<pid>/stat.
// It is 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs
// cgo to ask; prometheus/procfs makes the same assumption).
const userHZ = 100

// pageSize converts the rss field of /proc/<pid>/stat (pages) to bytes.
var pageSize = int64(unix.Getpagesize())

// pfKthread is PF_KTHREAD in the flags field of /proc/<pid>/stat: kernel
// threads are never members of a worker.
const pfKthread = 0x00200000

// atFDCWD is a variable so that its negative value converts to uintptr at run time.
var atFDCWD = unix.AT_FDCWD

// errVanished means the process (or the file) is gone: the process exited
// between being listed and being read. It is normal, not an error.
var errVanished = errors.New("process vanished")

// errPermission means the kernel refused the read (EACCES/EPERM).
var errPermission = errors.New("permission denied")

// procStat is what the scraper needs from /proc/<pid>/stat.
type procStat struct {
	state      byte
	ppid       int32
	flags      uint64
	minflt     uint64
	cminflt    uint64
	utime      uint64 // ticks
	stime      uint64
	cutime     uint64 // ticks of reaped children (their own c-times included)
	cstime     uint64
	numThreads int64
	starttime  uint64 // ticks after boot: with the pid, a process's identity
	rssPages   int64
	comm       [16]byte // TASK_COMM_LEN is 16 including the NUL
	commLen    int
}

func (s *procStat) commString() string { return string(s.comm[:s.commLen]) }

// procReader reads /proc files through reused buffers. Not safe for
// concurrent use: the scraper owns one.
type procReader struct {
	root  string // proc root, e.g. /proc or /hostfs/proc
	path  []byte // NUL-terminated path being built
	buf   []byte // file contents
	dents []byte // getdents64 buffer
	// noFDSize forces listing /proc/<pid>/fd (fixture trees, where the fd
	// directory is a plain directory whose size is not a count).
	noFDSize bool
}

func newProcReader(root string) *procReader {
	return &procReader{
		root:  root,
		path:  make([]byte, 0, 256),
		buf:   make([]byte, 0, 64*1024),
		dents: make([]byte, 32*1024),
	}
}

// pidPath sets r.path to <root>/<pid>/<name> with a trailing NUL.
func (r *procReader) pidPath(pid int32, name string) {
	p := r.path[:0]
	p = append(p, r.root...)
	p = append(p, '/')
	p = strconv.AppendInt(p, int64(pid), 10)
	p = append(p, '/')
	p = append(p, name...)
	p = append(p, 0)
	r.path = p
}

// childrenPath sets r.path to <root>/<pid>/task/<tid>/children.
func (r *procReader) childrenPath(pid, tid int32) {
	p := r.path[:0]
	p = append(p, r.root...)
	p = append(p, '/')
	p = strconv.AppendInt(p, int64(pid), 10)
	p = append(p, "/task/"...)
	p = strconv.AppendInt(p, int64(tid), 10)
	p = append(p, "/children"...)
	p = append(p, 0)
	r.path = p
}

// plainPath sets r.path to an arbitrary path.
func (r *procReader) plainPath(path string) {
	r.path = append(append(r.path[:0], path...), 0)
}

// mapError is mapErrno for an error from golang.org/x/sys/unix.
func mapError(err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return mapErrno(errno)
	}
	return err
}

func mapErrno(errno unix.Errno) error {
	switch errno {
	case unix.ENOENT, unix.ESRCH:
		return errVanished
	case unix.EACCES, unix.EPERM:
		return errPermission
	}
	return errno
}

// openPath opens r.path read-only.
func (r *procReader) openPath(flags int) (int, error) {
	fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(atFDCWD),
		uintptr(unsafe.Pointer(&r.path[0])), uintptr(flags|unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
	if errno != 0 {
		return -1, mapErrno(errno)
	}
	return int(fd), nil
}

// readPath reads the whole file at r.path into r.buf (growing it for big
// files such as long command lines, kept for the next read).
func (r *procReader) readPath() ([]byte, error) {
	fd, err := r.openPath(0)
	if err != nil {
		return nil, err
	}
	b, err := r.readAll(fd, false)
	_ = unix.Close(fd)
	return b, err
}

// readAll reads an open file to its end into r.buf: with read(2) from its
// current position, or (at) with pread(2) from offset 0, for a held file (a
// seq_file such as stat or children is generated again by a read at 0).
func (r *procReader) readAll(fd int, at bool) ([]byte, error) {
	b := r.buf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		var n int
		var err error
		if at {
			n, err = unix.Pread(fd, b[len(b):cap(b)], int64(len(b)))
		} else {
			n, err = unix.Read(fd, b[len(b):cap(b)])
		}
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			r.buf = b
			return nil, mapError(err)
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	r.buf = b
	return b, nil
}

// readFile reads a file by path (cgroup files, pid files). Allocation-free too.
func (r *procReader) readFile(path string) ([]byte, error) {
	r.plainPath(path)
	return r.readPath()
}

// readStat reads and parses /proc/<pid>/stat.
func (r *procReader) readStat(pid int32, st *procStat) error {
	r.pidPath(pid, "stat")
	b, err := r.readPath()
	if err != nil {
		return err
	}
	if !parseStat(b, st) {
		// A half-written stat cannot happen for a live process; treat it
		// like a process that is going away rather than failing the scrape.
		return errVanished
	}
	return nil
}

// parseStat parses the content of /proc/<pid>/stat. comm may contain spaces
// and ')', so it runs from the first '(' to the LAST ')'.
func parseStat(b []byte, st *procStat) bool {
	open := bytes.IndexByte(b, '(')
	if open < 0 {
		return false
	}
	closing := bytes.LastIndexByte(b, ')')
	if closing <= open || closing+2 >= len(b) {
		return false
	}
	st.commLen = copy(st.comm[:], b[open+1:closing])
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
				st.state = tok[0]
			}
		case 4:
			st.ppid = int32(min(parseCount(tok), math.MaxInt32))
		case 9:
			st.flags = uint64(parseCount(tok))
		case 10:
			st.minflt = uint64(parseCount(tok))
		case 11:
			st.cminflt = uint64(parseCount(tok))
		case 14:
			st.utime = uint64(parseCount(tok))
		case 15:
			st.stime = uint64(parseCount(tok))
		case 16:
			st.cutime = uint64(parseCount(tok))
		case 17:
			st.cstime = uint64(parseCount(tok))
		case 20:
			st.numThreads = parseCount(tok)
		case 22:
			st.starttime = uint64(parseCount(tok))
		case 24:
			// In pages: bounded so that rssPages*pageSize cannot overflow.
			st.rssPages = min(parseCount(tok), math.MaxInt64/pageSize)
		}
		field++
		i = j + 1
	}
	return field > 24
}

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

// forEachDirent opens the directory at r.path and calls fn with each entry
// name (and its d_type, unix.DT_*) except "." and "..". fn must not keep the
// slice nor use the reader. Allocation-free.
func (r *procReader) forEachDirent(fn func(name []byte, typ byte)) error {
	fd, err := r.openPath(unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return r.forEachDirentFD(fd, fn)
}

// forEachDirentFD lists an open directory from its current position.
func (r *procReader) forEachDirentFD(fd int, fn func(name []byte, typ byte)) error {
	for {
		n, err := unix.Getdents(fd, r.dents)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return mapError(err)
		}
		if n <= 0 {
			return nil
		}
		d := r.dents[:n]
		for len(d) >= 19 {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(d[16]) | int(d[17])<<8
			if reclen < 19 || reclen > len(d) {
				return nil
			}
			name := d[19:reclen]
			for k, c := range name {
				if c == 0 {
					name = name[:k]
					break
				}
			}
			if (len(name) != 1 || name[0] != '.') && (len(name) != 2 || name[0] != '.' || name[1] != '.') {
				fn(name, d[18])
			}
			d = d[reclen:]
		}
	}
}

// countDirents counts the entries of the directory at r.path.
func (r *procReader) countDirents() (int64, error) {
	var n int64
	err := r.forEachDirent(func([]byte, byte) { n++ })
	return n, err
}

// fdCount counts open file descriptors. Since Linux 6.2 a stat() of
// /proc/<pid>/fd reports the count as its size: one syscall instead of
// open + getdents + close. Older kernels report 0 there, and then (or for a
// process with no open files) the directory is listed.
func (r *procReader) fdCount(pid int32) (int64, error) {
	r.pidPath(pid, "fd")
	var st unix.Stat_t
	_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(atFDCWD),
		uintptr(unsafe.Pointer(&r.path[0])), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if errno != 0 {
		return 0, mapErrno(errno)
	}
	if st.Size > 0 && !r.noFDSize {
		return st.Size, nil
	}
	return r.countDirents()
}

// children appends the pids listed in /proc/<pid>/task/<tid>/children.
func (r *procReader) children(pid, tid int32, out []int32) ([]int32, error) {
	r.childrenPath(pid, tid)
	b, err := r.readPath()
	if err != nil {
		return out, err
	}
	return parsePidList(b, out), nil
}

// parsePidList appends the pids of a whitespace-separated list (the children
// file, cgroup.procs). Anything that is not a valid pid (0, out of int32
// range, not all digits) is skipped: a wrapped number must never name another
// process, such as pid 1.
func parsePidList(b []byte, out []int32) []int32 {
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

// parsePIDFile parses a pid file: one pid, surrounding whitespace allowed.
// It returns 0 for anything else.
func parsePIDFile(b []byte) int32 {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return max(parsePid(b), 0)
}

// dirPids appends the entries of the directory at r.path that are pids (the
// proc root) or thread ids (a task directory).
func (r *procReader) dirPids(out []int32) ([]int32, error) {
	fd, err := r.openPath(unix.O_DIRECTORY)
	if err != nil {
		return out, err
	}
	defer unix.Close(fd)
	return r.dirPidsFD(fd, out)
}

// dirPidsFD is dirPids of an open directory, listed from its current position.
func (r *procReader) dirPidsFD(fd int, out []int32) ([]int32, error) {
	err := r.forEachDirentFD(fd, func(name []byte, _ byte) {
		if p := parsePid(name); p > 0 {
			out = append(out, p)
		}
	})
	return out, err
}

// tids appends the thread ids of a process.
func (r *procReader) tids(pid int32, out []int32) ([]int32, error) {
	r.pidPath(pid, "task")
	return r.dirPids(out)
}

// tidsFD appends the thread ids listed by a held task directory.
func (r *procReader) tidsFD(fd int, out []int32) ([]int32, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return out, mapError(err)
	}
	return r.dirPidsFD(fd, out)
}

// cmdline returns the command line with NULs turned into spaces (as ps shows
// it), which is what role and selector regexes match. It allocates: it is only
// read when a process is first seen or has exec'd.
func (r *procReader) cmdline(pid int32) (string, error) {
	r.pidPath(pid, "cmdline")
	b, err := r.readPath()
	if err != nil {
		return "", err
	}
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	// b is the reader's scratch buffer (the next read overwrites it): the
	// NULs are replaced in place and the one copy is the returned string.
	for i, c := range b {
		if c == 0 {
			b[i] = ' '
		}
	}
	return string(b), nil
}

// environ returns the value of one environment variable of a process (read
// only when a worker's root is found, for the id template).
func (r *procReader) environ(pid int32, name string) (string, bool, error) {
	r.pidPath(pid, "environ")
	b, err := r.readPath()
	if err != nil {
		return "", false, err
	}
	v, ok := envValue(b, name)
	return v, ok, nil
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

// pss returns the Pss of /proc/<pid>/smaps_rollup in bytes.
func (r *procReader) pss(pid int32) (int64, error) {
	r.pidPath(pid, "smaps_rollup")
	b, err := r.readPath()
	if err != nil {
		return 0, err
	}
	v, ok := fieldKB(b, "Pss:")
	if !ok {
		return 0, errVanished
	}
	return v, nil
}

// cut splits b at the first sep: what comes before and what follows (nil
// when there is no sep). No allocation: the parsers below run per process.
func cut(b []byte, sep byte) (head, rest []byte) {
	if i := bytes.IndexByte(b, sep); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// fieldKB finds "<key> <n> kB" in a /proc key-value file and returns n*1024.
func fieldKB(b []byte, key string) (int64, bool) {
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

// parseCgroupMemory parses memory.current or memory.max: a byte count, or
// "max" (no limit), which yields ok=false.
func parseCgroupMemory(b []byte) (int64, bool) {
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || b[0] < '0' || b[0] > '9' {
		return 0, false
	}
	return parseCount(b), true
}

// parseCPUMax parses cgroup v2 cpu.max ("$QUOTA $PERIOD", QUOTA may be "max")
// into a number of CPUs; ok=false when unlimited or malformed.
func parseCPUMax(b []byte) (float64, bool) {
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
		return 0, false
	}
	q, p := parseInt(f[0]), parseInt(f[1])
	if q <= 0 || p <= 0 {
		return 0, false
	}
	return float64(q) / float64(p), true
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
