//go:build linux

package procfs // import "github.com/workerwatch/workerwatch/internal/procfs"

// Files held open between reads.
//
// Opening a /proc file costs a path lookup through /proc/<pid> on every
// read; that lookup, not the read, is most of the cost of reading a
// process. A process's stat and children files and its fd directory are
// therefore opened once and read again with pread/fstat (BenchmarkReadProcess
// in readcost_test.go: re-reading stat costs about half of opening and
// reading it, children about a fifth, the fd count about a third). This is
// also what lets the receiver read a process for less than the floor of
// opening and reading stat and statm.
//
// A held file names the process it was opened for, never a later process
// that reuses the pid: once that process is reaped, reads fail with ESRCH
// (stat, the fd directory) or come back empty (children), and the process's
// files are closed and the pid is read by path again. Each held stat or
// children file keeps one page of seq_file buffer in the kernel (charged to
// the reader's memory cgroup), which is why HeldFiles bounds them; past the
// bound, processes are read by path.

import (
	"slices"

	"golang.org/x/sys/unix"
)

// heldFD is a file kept open between reads: its descriptor + 1, so that
// the zero value (a new process) holds nothing.
type heldFD int32

func (h heldFD) fd() int { return int(h) - 1 }

// heldKid is the children file of one thread.
type heldKid struct {
	tid int32
	f   heldFD
}

// Held are the files one process keeps open. The zero value holds nothing.
type Held struct {
	stat  heldFD
	fdDir heldFD // O_PATH: fstat reports the open file count (Linux >= 6.2)
	task  heldFD // task directory, listed again for multi-threaded processes
	kids  []heldKid
}

// HoldsStat reports whether the process's stat file is held.
func (h *Held) HoldsStat() bool { return h.stat != 0 }

// Empty reports whether nothing is held and no thread is tracked.
func (h *Held) Empty() bool {
	return h.stat == 0 && h.fdDir == 0 && h.task == 0 && len(h.kids) == 0
}

// HeldFiles reads processes through their held files, and counts the files
// against a bound. Not safe for concurrent use (it shares its Reader).
type HeldFiles struct {
	r         *Reader
	open, max int
}

// NewHeldFiles holds at most limit files, capped at half of the process's
// open-file limit (RLIMIT_NOFILE) so that held /proc files never starve the
// process's sockets and other files (Go raises the soft limit to the hard
// one at start). A reader of a fixture tree holds none: a held file of a
// plain directory names no process.
func NewHeldFiles(r *Reader, limit int) *HeldFiles {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur < uint64(2*limit) {
		limit = int(rl.Cur / 2)
	}
	if !r.IsProcfs() {
		limit = 0
	}
	return &HeldFiles{r: r, max: limit}
}

// Open is the number of files held now.
func (p *HeldFiles) Open() int { return p.open }

// hold opens r.path to keep it; it returns 0 when the bound is reached or
// the open fails (the caller then reads by path).
func (p *HeldFiles) hold(flags int) heldFD {
	if p.open >= p.max {
		return 0
	}
	fd, err := p.r.openPath(flags)
	if err != nil {
		return 0
	}
	p.open++
	return heldFD(fd + 1)
}

func (p *HeldFiles) close(h *heldFD) {
	if *h != 0 {
		_ = unix.Close(h.fd())
		*h = 0
		p.open--
	}
}

// Release closes every file a process holds.
func (p *HeldFiles) Release(f *Held) {
	p.close(&f.stat)
	p.close(&f.fdDir)
	p.close(&f.task)
	for i := range f.kids {
		p.close(&f.kids[i].f)
	}
	f.kids = f.kids[:0]
}

// syncKids keeps the children files of the listed threads (tids sorted),
// closes those of threads that are gone and adds empty slots for new ones.
func (p *HeldFiles) syncKids(f *Held, tids []int32) {
	if len(f.kids) == len(tids) {
		same := true
		for i, k := range f.kids {
			if k.tid != tids[i] { //nolint:gosec // G602: len(tids) == len(f.kids) is checked above
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	kept := f.kids[:0]
	j := 0
	for _, k := range f.kids {
		for j < len(tids) && tids[j] < k.tid {
			j++
		}
		if j < len(tids) && tids[j] == k.tid {
			kept = append(kept, k)
		} else {
			p.close(&k.f)
		}
	}
	f.kids = kept
	for _, t := range tids {
		if _, found := slices.BinarySearchFunc(f.kids[:len(kept)], t, cmpKid); !found {
			f.kids = append(f.kids, heldKid{tid: t})
		}
	}
	slices.SortFunc(f.kids, func(a, b heldKid) int { return int(a.tid) - int(b.tid) })
}

func cmpKid(k heldKid, t int32) int { return int(k.tid) - int(t) }

// Stat reads a process's stat through its held file when it has one (h may
// be nil). A held file whose process is gone is released and the pid is
// read by path: it may be a new process now.
func (p *HeldFiles) Stat(h *Held, pid int32, st *Stat) error {
	if h != nil && h.stat != 0 {
		b, err := p.r.readAll(h.stat.fd(), true)
		if err == nil && ParseStat(b, st) {
			return nil
		}
		p.Release(h)
	}
	return p.r.ReadStat(pid, st)
}

// HoldStat opens a process's stat file for the next reads.
func (p *HeldFiles) HoldStat(h *Held, pid int32) {
	if h.stat == 0 {
		p.r.pidPath(pid, "stat")
		h.stat = p.hold(0)
	}
}

// FDCount counts a process's open files, through its held fd directory
// (opened first when hold is true).
func (p *HeldFiles) FDCount(h *Held, pid int32, hold bool) (int64, error) {
	r := p.r
	if h.fdDir == 0 && hold && !r.notProcfs {
		r.pidPath(pid, "fd")
		h.fdDir = p.hold(unix.O_PATH | unix.O_DIRECTORY)
	}
	if h.fdDir != 0 {
		var st unix.Stat_t
		if err := unix.Fstat(h.fdDir.fd(), &st); err != nil {
			return 0, mapError(err)
		}
		if st.Size > 0 {
			return st.Size, nil
		}
		// No count in the size (before Linux 6.2, or no open file): list the
		// directory, without a second stat by path that would say the same.
		r.pidPath(pid, "fd")
		return r.countDirents()
	}
	return r.FDCount(pid)
}

// Tids lists a process's threads, sorted, through its held task directory
// (opened first when hold is true).
func (p *HeldFiles) Tids(h *Held, pid int32, hold bool, out []int32) ([]int32, error) {
	r := p.r
	if h.task == 0 && hold {
		r.pidPath(pid, "task")
		h.task = p.hold(unix.O_DIRECTORY)
	}
	var err error
	if h.task != 0 {
		out, err = r.tidsFD(h.task.fd(), out)
	} else {
		out, err = r.Tids(pid, out)
	}
	slices.Sort(out)
	return out, err
}

// Children appends the children of a process: the children file of each of
// the listed threads (sorted; a child belongs to the thread that forked it),
// through held files (opened first when hold is true). The error is the
// main thread's (pid's own) only: another thread may exit at any time.
func (p *HeldFiles) Children(h *Held, pid int32, tids []int32, hold bool, out []int32) ([]int32, error) {
	p.syncKids(h, tids)
	for i := range h.kids {
		k := &h.kids[i]
		var err error
		if out, err = p.childrenOfThread(k, pid, hold, out); err != nil && k.tid == pid {
			return out, err
		}
	}
	return out, nil
}

// childrenOfThread appends the children of one thread through its held
// children file.
func (p *HeldFiles) childrenOfThread(k *heldKid, pid int32, hold bool, out []int32) ([]int32, error) {
	if k.f == 0 && hold {
		p.r.childrenPath(pid, k.tid)
		k.f = p.hold(0)
	}
	if k.f == 0 {
		return p.r.Children(pid, k.tid, out)
	}
	b, err := p.r.readAll(k.f.fd(), true)
	if err != nil {
		return out, err
	}
	return ParsePidList(b, out), nil
}
