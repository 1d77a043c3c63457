//go:build linux

package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

// The tree walk: from the worker's root through each process's children
// files (or the members of its cgroup), one stat read per process, through
// files held open between scrapes.

import (
	"errors"
	"slices"

	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

// walk reads the worker's tree (or its cgroup) and updates its state. It
// returns false when the root is gone.
func (s *workerScraper) walk(w *worker) bool {
	var st procfs.Stat
	if err := s.files.Stat(heldOf(w.members[w.rootPid]), w.rootPid, &st); err != nil || st.Starttime != w.rootStart || st.State == 'Z' {
		return false
	}
	if s.ev != nil && w.evg != nil && s.ev.RootEnded(w.evg, w.rootPid) {
		// Exiting: the kernel's exit event came before /proc shows it.
		return false
	}
	w.gen++
	w.lastWalk = s.scrapeTime
	w.cpuLimit = s.readCPULimit(w)
	w.resetScratch()
	if w.kind.sel == selCgroup {
		s.walkCgroup(w, &st)
	} else {
		s.walkTree(w, &st)
	}
	w.sweep()
	w.finish()
	exact := false
	if s.ev != nil {
		exact = s.syncEvents(w)
		if exact && w.initialized {
			s.countUnseen(w)
		}
	}
	if !exact && w.initialized {
		w.estimateUnseen()
	}
	return true
}

// readCPULimit reads the worker's CPU limit (contract.CPULimit): the CPUs
// its root may run on, lowered to the tightest cpu.max quota of its cgroup
// and their ancestors. Both can change while the worker runs (taskset -p, a
// resized pod), so they are read at every walk, per worker (not per
// process): one sched_getaffinity call (the status file for a proc_root of
// another pid namespace) and one cpu.max read per cgroup level, together
// about the cost of reading one or two processes' stat (BenchmarkReadProcess
// in internal/procfs: affinity/*, cpu.max/three-levels, stat/open-read).
func (s *workerScraper) readCPULimit(w *worker) float64 {
	affinity, _ := s.r.CPUsAllowed(w.rootPid)
	var quota, period int64
	if w.cgroupV2 != "" {
		quota, period, _ = s.r.CgroupCPUMax(s.cfg.CgroupRoot, w.cgroupV2)
	}
	return contract.CPULimit(affinity, float64(quota), float64(period))
}

// countUnseen counts the members that forked and exited without a scrape
// seeing them (from the proc connector), in the worker's default role. An
// exit of a pid this walk saw for the first time is the scrape's own (it
// counted that process's start, and counts its exit when it is gone), unless
// that process started after the exit (the pid was reused).
func (s *workerScraper) countUnseen(w *worker) {
	def := w.kind.defRole
	for _, e := range s.evExits {
		if m := w.members[e.Pid]; m != nil && m.gen == w.gen && m.sightings == 1 &&
			m.start*(1e9/procfs.UserHZ) <= e.Ns+s.bootOff+2e9/procfs.UserHZ {
			continue
		}
		w.started[def]++
		w.exited[def]++
	}
}

func (s *workerScraper) walkTree(w *worker, rootSt *procfs.Stat) {
	s.stack = append(s.stack[:0], w.rootPid)
	var st procfs.Stat
	for len(s.stack) > 0 {
		pid := s.stack[len(s.stack)-1]
		s.stack = s.stack[:len(s.stack)-1]
		m := w.members[pid]
		if !s.memberStat(w, m, pid, rootSt, &st) {
			continue
		}
		if m = s.account(w, m, pid, &st); m == nil {
			continue
		}
		if st.Exited() {
			continue
		}
		s.stack = s.childrenOf(m, pid, &st, s.stack)
	}
}

func (s *workerScraper) walkCgroup(w *worker, rootSt *procfs.Stat) {
	dir := s.cfg.CgroupRoot + "/" + w.cgroupRel
	s.cgPids = s.r.CgroupProcs(dir, s.cgPids[:0])
	var st procfs.Stat
	for _, pid := range s.cgPids {
		m := w.members[pid]
		if s.memberStat(w, m, pid, rootSt, &st) {
			s.account(w, m, pid, &st)
		}
	}
}

// memberStat fills st for a process found by either walk (m is its member
// from the previous scrapes, or nil; the root's stat was read already) and
// reports whether it is a process to account: not gone since it was listed,
// and not a kernel thread.
func (s *workerScraper) memberStat(w *worker, m *member, pid int32, rootSt, st *procfs.Stat) bool {
	if pid == w.rootPid {
		*st = *rootSt
	} else if err := s.files.Stat(heldOf(m), pid, st); err != nil {
		s.readErr(w, err)
		return false
	}
	return !st.KernelThread()
}

// heldOf is the held files of a member (nil for a process not seen before).
func heldOf(m *member) *procfs.Held {
	if m == nil {
		return nil
	}
	return &m.files
}

// holds reports whether a member's files are worth holding: from its second
// sighting on. A process seen once (a compiler in a build, a short job)
// would pay for opening and closing files it is never read through again.
func holds(m *member) bool { return m.sightings >= 2 }

func (s *workerScraper) readErr(w *worker, err error) {
	if errors.Is(err, procfs.ErrPermission) {
		s.perms++
		if !s.logged[w.kind.keyStat] { // the fields would be built for every process
			s.permissionOnce(w.kind.keyStat, "cannot read /proc/<pid>/stat; check that proc_root is mounted without hidepid", zap.String("proc_root", s.cfg.ProcRoot))
		}
		return
	}
	// Exited between being listed and being read: normal, only counted.
	s.vanished++
}

// childrenOf appends the children of a process: /proc/<pid>/task/<tid>/children
// of every thread (a child belongs to the thread that forked it), or, where the
// kernel lacks that file, the parent-pid index of the whole host.
func (s *workerScraper) childrenOf(m *member, pid int32, st *procfs.Stat, out []int32) []int32 {
	if s.noChildren {
		return s.childrenByPPID(pid, out)
	}
	if st.NumThreads <= 1 {
		s.tidBuf = append(s.tidBuf[:0], pid)
	} else {
		var err error
		if s.tidBuf, err = s.files.Tids(&m.files, pid, holds(m), s.tidBuf[:0]); err != nil {
			return out
		}
	}
	out, err := s.files.Children(&m.files, pid, s.tidBuf, holds(m), out)
	if err != nil {
		return s.childrenFallback(m, pid, err, out)
	}
	return out
}

// childrenFallback tells a process that exited since its stat was read from
// a kernel without children files: the process is still there.
func (s *workerScraper) childrenFallback(m *member, pid int32, err error, out []int32) []int32 {
	if !errors.Is(err, procfs.ErrVanished) {
		return out
	}
	var st procfs.Stat
	if s.r.ReadStat(pid, &st) != nil || st.Starttime != m.start {
		return out // the process itself is gone
	}
	s.logOnce("nochildren", "the kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN); finding children by a scan of all processes, whose cost grows with the host", zap.Int32("pid", pid))
	s.noChildren = true
	s.files.Release(&m.files)
	return s.childrenByPPID(pid, out)
}

// childrenByPPID appends the children of a process from the parent-pid
// index of the whole host, built once per scrape.
func (s *workerScraper) childrenByPPID(pid int32, out []int32) []int32 {
	s.buildPPIDIndex()
	i, _ := slices.BinarySearchFunc(s.ppidIdx, pid, func(p pidPair, t int32) int { return int(p.ppid) - int(t) })
	for ; i < len(s.ppidIdx) && s.ppidIdx[i].ppid == pid; i++ {
		out = append(out, s.ppidIdx[i].pid)
	}
	return out
}

// buildPPIDIndex reads every process's parent once per scrape (fallback only).
func (s *workerScraper) buildPPIDIndex() {
	if s.ppidOK {
		return
	}
	s.ppidOK = true
	s.scans++
	s.tidBuf, _ = s.r.Pids(s.tidBuf[:0])
	s.ppidIdx = s.ppidIdx[:0]
	var st procfs.Stat
	for _, p := range s.tidBuf {
		if s.r.ReadStat(p, &st) == nil && !st.KernelThread() {
			s.ppidIdx = append(s.ppidIdx, pidPair{ppid: st.PPID, pid: p})
		}
	}
	slices.SortFunc(s.ppidIdx, func(a, b pidPair) int {
		if a.ppid != b.ppid {
			return int(a.ppid) - int(b.ppid)
		}
		return int(a.pid) - int(b.pid)
	})
}

// account folds one process reading into the worker (m is the pid's member
// before this reading, or nil) and returns the process's member. It returns
// nil when the process was already visited in this scrape (a pid listed
// twice during a race).
func (s *workerScraper) account(w *worker, m *member, pid int32, st *procfs.Stat) *member {
	if m != nil && m.gen == w.gen && m.start == st.Starttime {
		return nil
	}
	s.read++
	k := w.kind
	m, isNew := w.observe(m, pid, st)
	if holds(m) {
		s.files.HoldStat(&m.files, pid)
	}
	changed := m.commChanged(st)
	// The command line is read when a process is first seen, again on the
	// second sighting and whenever comm changes, because a fork is seen with
	// its parent's command line until it execs.
	reread := isNew || changed || m.sightings == 2
	isRoot := pid == w.rootPid
	var cmd string
	var cmdErr error
	// The root's role is fixed: its command line is only read for export.
	if reread && (!isRoot || s.redact != nil) {
		cmd, cmdErr = s.r.Cmdline(pid)
	}
	switch {
	case isRoot:
		w.setRole(m, 0)
	case reread && (cmdErr == nil || isNew):
		// Classify by command line.
		role := k.classify(st.CommString(), cmd, st.PPID == w.rootPid)
		if isNew {
			m.role = role
		} else {
			w.setRole(m, role)
		}
	}
	if s.redact != nil && reread && cmdErr == nil {
		m.cmdline = s.redact.apply(cmd)
	}
	if isNew {
		m.startRole = m.role
		if w.initialized {
			w.started[m.role]++
		}
	}
	if st.State == 'Z' {
		if !m.zombie {
			m.zombie = true
			if w.initialized {
				w.exited[m.startRole]++
			}
		}
		return m
	}
	r := m.role
	w.count[r]++
	w.rss[r] += m.rss
	w.threads[r] += m.threads
	if s.wantFDs {
		if n, err := s.files.FDCount(&m.files, pid, holds(m)); err == nil {
			w.fds[r] += n
		} else if errors.Is(err, procfs.ErrPermission) {
			s.perms++
			if !s.logged[k.keyFD] {
				s.permissionOnce(k.keyFD, "cannot count open files of a worker process (/proc/<pid>/fd); run the collector as the worker's user, as root, or grant it CAP_SYS_PTRACE; process.unix.file_descriptor.count leaves such processes out",
					zap.String("worker", k.key), zap.Int32("pid", pid))
			}
		}
	}
	if s.wantPSS && m.rss <= s.cfg.PSSMaxRSS {
		if v, err := s.r.PSS(pid); err == nil {
			w.pss[r] += v
		} else if errors.Is(err, procfs.ErrPermission) {
			s.perms++
			if !s.logged[k.keyPSS] {
				s.permissionOnce(k.keyPSS, "cannot read /proc/<pid>/smaps_rollup for PSS; run the collector as the worker's user, as root, or grant it CAP_SYS_PTRACE",
					zap.String("worker", k.key), zap.Int32("pid", pid))
			}
		}
	}
	if s.wantTop {
		w.pushTop(s.cfg.TopProcesses, pid, m)
	}
	return m
}

// pushTop keeps the n largest processes by RSS (insertion into a small sorted
// slice; n is at most 100).
func (w *worker) pushTop(n int, pid int32, m *member) {
	e := topEntry{pid: pid, rss: m.rss, role: m.role, comm: m.comm, n: m.commLen, cmdline: m.cmdline}
	if len(w.top) == n && w.top[n-1].rss >= e.rss {
		return
	}
	i := len(w.top)
	for i > 0 && w.top[i-1].rss < e.rss {
		i--
	}
	if len(w.top) < n {
		w.top = append(w.top, topEntry{})
	}
	copy(w.top[i+1:], w.top[i:len(w.top)-1])
	w.top[i] = e
}

// finish sums CPU per role after the sweep.
func (w *worker) finish() {
	copy(w.cpuU, w.accU)
	copy(w.cpuS, w.accS)
	for _, m := range w.members {
		u, sy := m.contribution()
		w.cpuU[m.role] += u
		w.cpuS[m.role] += sy
	}
}

// syncEvents hands the walked members to the proc connector and takes the
// exits of members no walk saw; it reports whether the interval since the
// previous walk was covered without lost events.
func (s *workerScraper) syncEvents(w *worker) bool {
	if w.evg == nil {
		w.evg = s.ev.NewGroup()
	}
	s.evWalked = s.evWalked[:0]
	for pid, m := range w.members {
		if m.gen == w.gen {
			s.evWalked = append(s.evWalked, pid)
		}
	}
	var covered bool
	s.evExits, covered = s.ev.Sync(w.evg, s.evWalked, s.evExits[:0])
	return covered
}
