package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

// Files held open between scrapes.
//
// Opening a /proc file costs a path lookup through /proc/<pid> on every
// scrape; that lookup, not the read, is most of the cost of reading a
// process. A member's stat and children files and its fd directory are
// therefore opened once and read again with pread/fstat (BenchmarkReadProcess
// in readcost_test.go: re-reading stat costs about half of opening and
// reading it, children about a fifth, the fd count about a third). This is also
// what lets the receiver read a process for less than the floor the issue
// set (opening and reading stat and statm).
//
// A held file names the process it was opened for, never a later process
// that reuses the pid: once that process is reaped, reads fail with ESRCH
// (stat, the fd directory) or come back empty (children), and the member's
// files are closed and the pid is read by path again. Each held stat or
// children file keeps one page of seq_file buffer in the kernel (charged to
// the collector's memory cgroup), which is why max_open_files bounds them;
// past the bound, processes are read by path as before.

import (
	"slices"

	"golang.org/x/sys/unix"
)

// heldFD is a file kept open between scrapes: its descriptor + 1, so that
// the zero value (a new member) holds nothing.
type heldFD int32

func (h heldFD) fd() int { return int(h) - 1 }

// heldKid is the children file of one thread.
type heldKid struct {
	tid int32
	f   heldFD
}

// heldFiles are one member's open files.
type heldFiles struct {
	stat  heldFD
	fdDir heldFD // O_PATH: fstat reports the open file count (Linux >= 6.2)
	task  heldFD // task directory, listed again for multi-threaded processes
	kids  []heldKid
}

// filePool counts the held files against max_open_files.
type filePool struct {
	open, max int
}

// hold opens r.path to keep it; it returns 0 when the pool is full or the
// open fails (the caller then reads by path).
func (p *filePool) hold(r *procReader, flags int) heldFD {
	if p.open >= p.max {
		return 0
	}
	fd, err := r.openPath(flags)
	if err != nil {
		return 0
	}
	p.open++
	return heldFD(fd + 1)
}

func (p *filePool) close(h *heldFD) {
	if *h != 0 {
		_ = unix.Close(h.fd())
		*h = 0
		p.open--
	}
}

// release closes every file a member holds.
func (p *filePool) release(f *heldFiles) {
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
func (p *filePool) syncKids(f *heldFiles, tids []int32) {
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

// statOf reads a process's stat, through the member's held file when it has
// one (m may be nil). A held file whose process is gone is closed and the pid
// is read by path: it may be a new process now.
func (s *workerScraper) statOf(m *member, pid int32, st *procStat) error {
	if m != nil && m.files.stat != 0 {
		b, err := s.r.readAll(m.files.stat.fd(), true)
		if err == nil && parseStat(b, st) {
			return nil
		}
		s.pool.release(&m.files)
	}
	return s.r.readStat(pid, st)
}

// holds reports whether a member's files are worth holding: from its second
// sighting on. A process seen once (a compiler in a build, a short job)
// would pay for opening and closing files it is never read through again.
func holds(m *member) bool { return m.sightings >= 2 }

// holdStat opens a member's stat file for the next scrapes.
func (s *workerScraper) holdStat(m *member, pid int32) {
	if m.files.stat == 0 && holds(m) {
		s.r.pidPath(pid, "stat")
		m.files.stat = s.pool.hold(s.r, 0)
	}
}

// fdCountOf counts a member's open files through its held fd directory.
func (s *workerScraper) fdCountOf(m *member, pid int32) (int64, error) {
	if m.files.fdDir == 0 && !s.r.noFDSize && holds(m) {
		s.r.pidPath(pid, "fd")
		m.files.fdDir = s.pool.hold(s.r, unix.O_PATH|unix.O_DIRECTORY)
	}
	if m.files.fdDir != 0 {
		var st unix.Stat_t
		if err := unix.Fstat(m.files.fdDir.fd(), &st); err != nil {
			return 0, mapError(err)
		}
		if st.Size > 0 {
			return st.Size, nil
		}
		// No count in the size (before Linux 6.2, or no open file): list the
		// directory, without a second stat by path that would say the same.
		s.r.pidPath(pid, "fd")
		return s.r.countDirents()
	}
	return s.r.fdCount(pid)
}

// tidsOf lists a multi-threaded member's threads, sorted, through its held
// task directory.
func (s *workerScraper) tidsOf(m *member, pid int32, out []int32) ([]int32, error) {
	if m.files.task == 0 && holds(m) {
		s.r.pidPath(pid, "task")
		m.files.task = s.pool.hold(s.r, unix.O_DIRECTORY)
	}
	var err error
	if m.files.task != 0 {
		out, err = s.r.tidsFD(m.files.task.fd(), out)
	} else {
		out, err = s.r.tids(pid, out)
	}
	slices.Sort(out)
	return out, err
}

// childrenOfThread appends the children of one thread through its held
// children file (k is the member's slot for that thread; hold: open it if
// it is not held yet).
func (s *workerScraper) childrenOfThread(k *heldKid, pid int32, hold bool, out []int32) ([]int32, error) {
	if k.f == 0 && hold {
		s.r.childrenPath(pid, k.tid)
		k.f = s.pool.hold(s.r, 0)
	}
	if k.f == 0 {
		return s.r.children(pid, k.tid, out)
	}
	b, err := s.r.readAll(k.f.fd(), true)
	if err != nil {
		return out, err
	}
	return parsePidList(b, out), nil
}

// releaseAll closes every held file (shutdown).
func (s *workerScraper) releaseAll() {
	for _, k := range s.kinds {
		for _, w := range k.instances {
			for _, m := range w.members {
				s.pool.release(&m.files)
			}
		}
	}
}

// heldFilesLimit caps max_open_files at half of the open-file limit, so that
// held /proc files never starve the collector's sockets and other files.
// (Go raises the soft limit to the hard one at start.)
func heldFilesLimit(limit int) int {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur < uint64(2*limit) {
		return int(rl.Cur / 2)
	}
	return limit
}
