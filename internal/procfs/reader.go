//go:build linux

package procfs // import "github.com/workerwatch/workerwatch/internal/procfs"

import (
	"errors"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UserHZ is the kernel's USER_HZ, the unit of the CPU times in
// /proc/<pid>/stat. It is 100 on every Linux architecture Go supports
// (sysconf(_SC_CLK_TCK) needs cgo to ask; prometheus/procfs makes the same
// assumption).
const UserHZ = 100

// PageSize converts the rss field of /proc/<pid>/stat (pages) to bytes.
var PageSize = int64(unix.Getpagesize())

// atFDCWD is a variable so that its negative value converts to uintptr at run time.
var atFDCWD = unix.AT_FDCWD

// ErrVanished means the process (or the file) is gone: the process exited
// between being listed and being read. It is normal, not an error.
var ErrVanished = errors.New("process vanished")

// ErrPermission means the kernel refused the read (EACCES/EPERM).
var ErrPermission = errors.New("permission denied")

// Reader reads /proc files through reused buffers. Not safe for concurrent
// use: each user (the receiver's scraper, a helper call) owns one.
type Reader struct {
	root  string // proc root, e.g. /proc or /hostfs/proc
	path  []byte // NUL-terminated path being built
	buf   []byte // file contents
	dents []byte // getdents64 buffer
	// notProcfs: the root is a plain directory (a fixture tree), where the
	// fd directory's size is not a count and a held file names no process.
	notProcfs bool
	// ownPidNS: the root is the procfs of this process's pid namespace, so
	// its pids can be given to system calls (sched_getaffinity).
	ownPidNS bool
}

// NewReader returns a reader of the proc root (e.g. "/proc", or
// "/hostfs/proc" in a container; a plain directory for fixture trees).
func NewReader(root string) *Reader {
	r := &Reader{
		root:  root,
		path:  make([]byte, 0, 256),
		buf:   make([]byte, 0, 64*1024),
		dents: make([]byte, 32*1024),
	}
	var fs unix.Statfs_t
	if unix.Statfs(root, &fs) != nil || fs.Type != unix.PROC_SUPER_MAGIC {
		r.notProcfs = true
	} else if self, err := os.Readlink(root + "/self"); err == nil && self == strconv.Itoa(os.Getpid()) {
		r.ownPidNS = true
	}
	return r
}

// IsProcfs reports whether the root is a real procfs (its pids are the
// kernel's), not a fixture directory.
func (r *Reader) IsProcfs() bool { return !r.notProcfs }

// pidPath sets r.path to <root>/<pid>/<name> with a trailing NUL.
func (r *Reader) pidPath(pid int32, name string) {
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
func (r *Reader) childrenPath(pid, tid int32) {
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

// plainPath sets r.path to dir, or to dir/name when name is not empty.
func (r *Reader) plainPath(dir, name string) {
	r.path = append(r.path[:0], dir...)
	if name != "" {
		r.path = append(append(r.path, '/'), name...)
	}
	r.path = append(r.path, 0)
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
		return ErrVanished
	case unix.EACCES, unix.EPERM:
		return ErrPermission
	}
	return errno
}

// openPath opens r.path read-only.
func (r *Reader) openPath(flags int) (int, error) {
	fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(atFDCWD),
		uintptr(unsafe.Pointer(&r.path[0])), uintptr(flags|unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
	if errno != 0 {
		return -1, mapErrno(errno)
	}
	return int(fd), nil
}

// readPath reads the whole file at r.path into r.buf (growing it for big
// files such as long command lines, kept for the next read).
func (r *Reader) readPath() ([]byte, error) {
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
func (r *Reader) readAll(fd int, at bool) ([]byte, error) {
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
			if errors.Is(err, unix.EINTR) {
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

// ReadFile reads a file by path (cgroup files, pid files) without
// allocating. The result is the reader's buffer: valid until its next read.
func (r *Reader) ReadFile(path string) ([]byte, error) {
	r.plainPath(path, "")
	return r.readPath()
}

// ReadStat reads and parses /proc/<pid>/stat.
func (r *Reader) ReadStat(pid int32, st *Stat) error {
	r.pidPath(pid, "stat")
	b, err := r.readPath()
	if err != nil {
		return err
	}
	if !ParseStat(b, st) {
		// A half-written stat cannot happen for a live process; treat it
		// like a process that is going away rather than failing the read.
		return ErrVanished
	}
	return nil
}

// forEachDirent opens the directory at r.path and calls fn with each entry
// name (and its d_type, unix.DT_*) except "." and "..". fn must not keep the
// slice nor use the reader. Allocation-free.
func (r *Reader) forEachDirent(fn func(name []byte, typ byte)) error {
	fd, err := r.openPath(unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return r.forEachDirentFD(fd, fn)
}

// forEachDirentFD lists an open directory from its current position.
func (r *Reader) forEachDirentFD(fd int, fn func(name []byte, typ byte)) error {
	for {
		n, err := unix.Getdents(fd, r.dents)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
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

// SubDirs calls fn with the name of each subdirectory of dir (the name is
// the reader's buffer: copy it to keep it; fn must not use the reader).
func (r *Reader) SubDirs(dir string, fn func(name []byte)) error {
	r.plainPath(dir, "")
	return r.forEachDirent(func(name []byte, typ byte) {
		if typ == unix.DT_DIR {
			fn(name)
		}
	})
}

// countDirents counts the entries of the directory at r.path.
func (r *Reader) countDirents() (int64, error) {
	var n int64
	err := r.forEachDirent(func([]byte, byte) { n++ })
	return n, err
}

// FDCount counts a process's open file descriptors. Since Linux 6.2 a
// stat() of /proc/<pid>/fd reports the count as its size: one syscall
// instead of open + getdents + close. Older kernels report 0 there, and
// then (or for a process with no open files) the directory is listed.
func (r *Reader) FDCount(pid int32) (int64, error) {
	r.pidPath(pid, "fd")
	var st unix.Stat_t
	_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(atFDCWD),
		uintptr(unsafe.Pointer(&r.path[0])), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if errno != 0 {
		return 0, mapErrno(errno)
	}
	if st.Size > 0 && !r.notProcfs {
		return st.Size, nil
	}
	return r.countDirents()
}

// Children appends the pids listed in /proc/<pid>/task/<tid>/children: the
// children forked by that thread.
func (r *Reader) Children(pid, tid int32, out []int32) ([]int32, error) {
	r.childrenPath(pid, tid)
	b, err := r.readPath()
	if err != nil {
		return out, err
	}
	return ParsePidList(b, out), nil
}

// dirPids appends the entries of the directory at r.path that are pids (the
// proc root) or thread ids (a task directory).
func (r *Reader) dirPids(out []int32) ([]int32, error) {
	fd, err := r.openPath(unix.O_DIRECTORY)
	if err != nil {
		return out, err
	}
	defer unix.Close(fd)
	return r.dirPidsFD(fd, out)
}

// dirPidsFD is dirPids of an open directory, listed from its current position.
func (r *Reader) dirPidsFD(fd int, out []int32) ([]int32, error) {
	err := r.forEachDirentFD(fd, func(name []byte, _ byte) {
		if p := parsePid(name); p > 0 {
			out = append(out, p)
		}
	})
	return out, err
}

// Pids appends the pids of every process under the proc root.
func (r *Reader) Pids(out []int32) ([]int32, error) {
	r.plainPath(r.root, "")
	return r.dirPids(out)
}

// Tids appends the thread ids of a process.
func (r *Reader) Tids(pid int32, out []int32) ([]int32, error) {
	r.pidPath(pid, "task")
	return r.dirPids(out)
}

// tidsFD appends the thread ids listed by a held task directory.
func (r *Reader) tidsFD(fd int, out []int32) ([]int32, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return out, mapError(err)
	}
	return r.dirPidsFD(fd, out)
}

// rawCmdline reads /proc/<pid>/cmdline without its trailing NULs (the
// reader's buffer).
func (r *Reader) rawCmdline(pid int32) ([]byte, error) {
	r.pidPath(pid, "cmdline")
	b, err := r.readPath()
	if err != nil {
		return nil, err
	}
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b, nil
}

// Cmdline returns the command line with NULs turned into spaces (as ps shows
// it), which is what role and selector regexes match. It allocates: it is
// only read when a process is first seen or has exec'd.
func (r *Reader) Cmdline(pid int32) (string, error) {
	b, err := r.rawCmdline(pid)
	if err != nil {
		return "", err
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

// Environ returns the value of one environment variable of a process (the
// receiver reads it only for a worker's root, for its id template). No other
// variable is copied out of the reader's buffer.
func (r *Reader) Environ(pid int32, name string) (string, bool, error) {
	r.pidPath(pid, "environ")
	b, err := r.readPath()
	if err != nil {
		return "", false, err
	}
	v, ok := envValue(b, name)
	return v, ok, nil
}

// PSS returns the Pss of /proc/<pid>/smaps_rollup in bytes. Reading it walks
// every mapping of the process under its mmap lock: callers gate it by size.
func (r *Reader) PSS(pid int32) (int64, error) {
	r.pidPath(pid, "smaps_rollup")
	b, err := r.readPath()
	if err != nil {
		return 0, err
	}
	v, ok := FieldKB(b, "Pss:")
	if !ok {
		return 0, ErrVanished
	}
	return v, nil
}

// CPUsAllowed returns how many CPUs a process may run on (its affinity), 0
// when unknown: with sched_getaffinity where the proc root is this process's
// own pid namespace (one system call, a tenth of reading status), else the
// Cpus_allowed_list of /proc/<pid>/status.
func (r *Reader) CPUsAllowed(pid int32) (int, error) {
	if r.ownPidNS {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(int(pid), &set); err != nil {
			return 0, mapError(err)
		}
		return set.Count(), nil
	}
	r.pidPath(pid, "status")
	b, err := r.readPath()
	if err != nil {
		return 0, err
	}
	return cpusAllowed(b), nil
}

// cpusAllowed counts the Cpus_allowed_list of a status file.
func cpusAllowed(b []byte) int {
	if v, ok := statusLine(b, "Cpus_allowed_list"); ok {
		return countCPUList(v)
	}
	return 0
}

// CgroupPath returns the cgroup v2 path of a process (the "0::" line of
// /proc/<pid>/cgroup), "" when it has none or it is not a clean absolute
// path.
func (r *Reader) CgroupPath(pid int32) (string, error) {
	r.pidPath(pid, "cgroup")
	b, err := r.readPath()
	if err != nil {
		return "", err
	}
	return cgroupV2Path(b), nil
}

// ReadPIDFile reads a pid file: one pid, surrounding whitespace allowed; 0
// when the file holds anything else.
func (r *Reader) ReadPIDFile(path string) (int32, error) {
	b, err := r.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return ParsePIDFile(b), nil
}
