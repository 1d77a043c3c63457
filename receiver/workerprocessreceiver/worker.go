//go:build linux

package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/workerwatch/workerwatch/internal/procfs"
	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/procevents"
)

// member is one process of a worker's tree, identified by pid + start time so
// that a reused pid never mixes two processes.
//
// CPU accounting (all in ticks, per cpu.mode):
//   - u, s: the process's own utime/stime; cu, cs: cutime/cstime, the CPU of
//     children it has reaped (the kernel adds a child's full total at wait()).
//   - cbu, cbs: the part of u+cu (s+cs) already attributed elsewhere: to the
//     roles of observed children that exited (their last reading went to their
//     role's accumulator) and, after a role change, to the previous role.
//
// A member contributes (u+cu-cbu, s+cs-cbs) to its role. When it leaves the
// tree, its contribution moves into the role's accumulator, and the parent
// that reaped it gets cbu/cbs raised by the exited child's last total, so the
// child's CPU is counted once, in the child's role, and whatever the child
// used after its last reading (or children too short-lived to be seen) shows
// up in the parent's cutime and is counted in the parent's role. Every role's
// sum therefore only grows.
type member struct {
	start     uint64
	gen       uint32
	ppid      int32
	role      int
	startRole int // started/exited are counted in the role the process was first seen with
	sightings uint8
	zombie    bool
	comm      [16]byte
	commLen   int
	files     procfs.Held // files held open between scrapes

	u, s, cu, cs uint64
	pcu, pcs     uint64 // cu, cs at the previous scrape
	cminflt      uint64
	pcminflt     uint64
	cbu, cbs     uint64

	// Per-scrape credit bookkeeping for children that exited.
	creditU, creditS uint64
	reapedSeen       bool

	rss     int64
	threads int64
	// cmdline is the redacted command line, kept only when
	// top_processes_command_line is enabled.
	cmdline string
}

func (m *member) contribution() (uint64, uint64) {
	u, s := m.u+m.cu, m.s+m.cs
	return sat(u, m.cbu), sat(s, m.cbs)
}

func sat(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// topEntry is one candidate of the bounded per-process top-N by RSS.
type topEntry struct {
	pid  int32
	rss  int64
	role int
	comm [16]byte
	n    int
	// cmdline is the member's redacted command line ("" unless enabled).
	cmdline string
}

// worker is one watched worker instance (one id).
type worker struct {
	kind *workerKind
	id   string
	name string

	rootPid   int32 // 0 when absent
	rootStart uint64
	// created is the root's process.creation.time, formatted once when the
	// root is adopted (setRoot; "" where the boot time is unknown).
	created   string
	cgroupRel string // cgroup selector: the matched cgroup (relative path)
	cgroupDir string // absolute cgroup v2 dir for cgroup metrics, "" when none
	cgroupV2  string // the root's cgroup v2 path under cgroup_root, "" when none or "/"
	// cpuLimit is the CPUs the worker may use (contract.CPULimit), read at
	// every walk: 0 when unknown.
	cpuLimit float64

	members     map[int32]*member
	gen         uint32
	startTime   pcommon.Timestamp
	initialized bool
	absentSince time.Time

	// Per role, indexed like kind.roles.
	accU, accS      []uint64 // ticks of members that left the tree
	started, exited []int64
	prevCPU         []uint64 // u+s ticks at the previous scrape, for utilization
	prevTime        time.Time
	hasPrev         bool
	rss, threads    []int64
	fds, count, pss []int64
	cpuU, cpuS      []uint64
	top             []topEntry
	departed        []*member // reused pids seen during the walk
	lastWalk        time.Time
	// evg is the worker's side of the proc connector (nil without it).
	evg *procevents.Group
	// ended is the root that ended last, reported on the worker's resource
	// while it is absent (ended.pid 0: none, or a new root was found).
	ended rootEnd
}

// rootEnd is a root process that ended: its incarnation, when, and how
// (exit: the kernel's exit event; its Pid 0 where the scrape found the root
// gone without one).
type rootEnd struct {
	pid     int32
	start   uint64
	created string
	at      time.Time
	// exited is at as process.exit.time, formatted once (rootGone).
	exited string
	exit   procevents.RootExit
}

func newWorker(k *workerKind, id, name string, now time.Time) *worker {
	n := len(k.roles)
	return &worker{
		kind:      k,
		id:        id,
		name:      name,
		members:   map[int32]*member{},
		startTime: pcommon.NewTimestampFromTime(now),
		accU:      make([]uint64, n),
		accS:      make([]uint64, n),
		started:   make([]int64, n),
		exited:    make([]int64, n),
		prevCPU:   make([]uint64, n),
		rss:       make([]int64, n),
		threads:   make([]int64, n),
		fds:       make([]int64, n),
		count:     make([]int64, n),
		pss:       make([]int64, n),
		cpuU:      make([]uint64, n),
		cpuS:      make([]uint64, n),
	}
}

// resetScratch clears the per-scrape sums.
func (w *worker) resetScratch() {
	clear(w.rss)
	clear(w.threads)
	clear(w.fds)
	clear(w.count)
	clear(w.pss)
	clear(w.cpuU)
	clear(w.cpuS)
	w.top = w.top[:0]
}

// observe records a fresh stat reading of a live tree member (m is the pid's
// member so far, or nil); it returns the member and whether it is new (first
// seen, or its pid was reused).
func (w *worker) observe(m *member, pid int32, st *procfs.Stat) (*member, bool) {
	if m != nil && m.start != st.Starttime {
		// The pid was reused: the old process left the tree. It is settled in
		// sweep, once its parent's reading of this scrape is known.
		w.departed = append(w.departed, m)
		delete(w.members, pid)
		m = nil
	}
	isNew := m == nil
	if isNew {
		m = &member{start: st.Starttime}
		w.members[pid] = m
		m.pcu, m.pcs, m.pcminflt = st.Cutime, st.Cstime, st.Cminflt
	} else {
		m.pcu, m.pcs, m.pcminflt = m.cu, m.cs, m.cminflt
	}
	m.gen = w.gen
	m.ppid = st.PPID
	m.u, m.s, m.cu, m.cs = st.Utime, st.Stime, st.Cutime, st.Cstime
	m.cminflt = st.Cminflt
	m.rss = st.RSSBytes()
	m.threads = st.NumThreads
	m.creditU, m.creditS, m.reapedSeen = 0, 0, false
	if m.sightings < 255 {
		m.sightings++
	}
	return m, isNew
}

// commChanged reports whether comm differs from the stored one (an exec) and
// stores the new one.
func (m *member) commChanged(st *procfs.Stat) bool {
	changed := m.commLen != st.CommLen || string(m.comm[:m.commLen]) != string(st.Comm[:st.CommLen])
	m.comm, m.commLen = st.Comm, st.CommLen
	return changed
}

// setRole moves the member to a new role, leaving what it used so far in the old one.
func (w *worker) setRole(m *member, role int) {
	if m.role == role {
		return
	}
	cu, cs := m.contribution()
	w.accU[m.role] += cu
	w.accS[m.role] += cs
	m.cbu, m.cbs = m.u+m.cu, m.s+m.cs
	m.role = role
}

// leave moves a member that left the tree into its role's accumulators and
// credits its parent (when the parent is a live member that reaped it).
func (w *worker) leave(m *member) {
	w.kind.files.Release(&m.files)
	cu, cs := m.contribution()
	w.accU[m.role] += cu
	w.accS[m.role] += cs
	if !m.zombie {
		w.exited[m.startRole]++
	}
	p := w.members[m.ppid]
	if p == nil || p.gen != w.gen || p.zombie {
		return
	}
	p.reapedSeen = true
	tu, ts := m.u+m.cu, m.s+m.cs
	availU := sat(sat(p.cu, p.pcu), p.creditU)
	availS := sat(sat(p.cs, p.pcs), p.creditS)
	gu, gs := min(availU, tu), min(availS, ts)
	p.creditU += gu
	p.creditS += gs
	p.cbu += gu
	p.cbs += gs
}

// sweep handles members not seen in this scrape (exited or left the tree).
func (w *worker) sweep() {
	for i, m := range w.departed {
		w.leave(m)
		w.departed[i] = nil
	}
	w.departed = w.departed[:0]
	for pid, m := range w.members {
		if m.gen != w.gen {
			w.leave(m)
			delete(w.members, pid)
		}
	}
}

// estimateUnseen detects children that started and exited between two
// scrapes without being seen, when process events are not available (or lost
// some): their parent's cminflt grew (the kernel adds a child's page faults
// when the parent reaps it) although no observed child of it exited. A lower
// bound: one per parent and interval.
func (w *worker) estimateUnseen() {
	def := w.kind.defRole
	for _, m := range w.members {
		if m.sightings > 1 && !m.reapedSeen && m.cminflt > m.pcminflt && !m.zombie {
			w.started[def]++
			w.exited[def]++
		}
	}
}
