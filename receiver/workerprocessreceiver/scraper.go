package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/scraper/scrapererror"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

type pidPair struct{ ppid, pid int32 }

type workerScraper struct {
	cfg    *Config
	logger *zap.Logger
	mb     *metadata.MetricsBuilder
	tel    *telemetry
	r      *procReader
	kinds  []*workerKind
	now    func() time.Time

	defaultNCPU float64
	wantFDs     bool
	wantPSS     bool
	wantTop     bool
	// redact is non-nil only when top_processes_command_line is enabled:
	// command lines are then read for the top-N series, always redacted.
	redact *redactor

	// Scratch reused across scrapes so that steady state allocates nothing per process.
	stack    []int32
	tidBuf   []int32
	cgPids   []int32
	cgSet    map[int32]struct{}
	scanPPID map[int32]int32
	ppidIdx  []pidPair
	ppidOK   bool
	// noChildren is set once the kernel is known to lack the children
	// files (CONFIG_PROC_CHILDREN): every walk then uses the parent-pid index.
	noChildren bool
	// pool counts the /proc files held open between scrapes (heldfiles.go).
	pool   filePool
	logged map[string]bool

	// ev is the proc connector subscription (nil: sampling only); evExits
	// is scratch for the exits handed over by ev.sync; bootOff is
	// CLOCK_BOOTTIME - CLOCK_MONOTONIC at the scrape.
	ev      *procEvents
	evExits []evExit
	bootOff uint64
	evLost  int64

	// Per-scrape counts for internal telemetry.
	read, vanished, perms, scans int64
	scanErr                      error
	scrapeTime                   time.Time
}

func newWorkerScraper(set receiver.Settings, cfg *Config) (*workerScraper, error) {
	// process.command_line is exported only through its own switch, which
	// also redacts it; Validate rejects enabling the attribute directly.
	mbc := cfg.MetricsBuilderConfig
	top := &mbc.Metrics.WorkerwatchProcessTopMemoryUsage
	top.EnabledAttributes = slices.DeleteFunc(slices.Clone(top.EnabledAttributes), func(k metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKey) bool {
		return k == metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKeyProcessCommandLine
	})
	var red *redactor
	if cfg.TopProcessesCommandLine.Enabled {
		var err error
		if red, err = newRedactor(cfg.TopProcessesCommandLine.Redact); err != nil {
			return nil, err
		}
		top.EnabledAttributes = append(top.EnabledAttributes, metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKeyProcessCommandLine)
	}
	s := &workerScraper{
		cfg:         cfg,
		logger:      set.Logger,
		redact:      red,
		mb:          metadata.NewMetricsBuilder(mbc, set),
		r:           newProcReader(cfg.ProcRoot),
		now:         time.Now,
		defaultNCPU: float64(runtime.NumCPU()),
		cgSet:       map[int32]struct{}{},
		scanPPID:    map[int32]int32{},
		logged:      map[string]bool{},
		wantFDs:     cfg.Metrics.ProcessUnixFileDescriptorCount.Enabled,
		wantPSS:     cfg.Metrics.WorkerwatchProcessMemoryPss.Enabled,
		wantTop:     cfg.Metrics.WorkerwatchProcessTopMemoryUsage.Enabled && cfg.TopProcesses > 0,
		pool:        filePool{max: heldFilesLimit(cfg.MaxOpenFiles)},
	}
	// Only a real procfs reports the fd count as the fd directory's size.
	var fs unix.Statfs_t
	if unix.Statfs(cfg.ProcRoot, &fs) != nil || fs.Type != unix.PROC_SUPER_MAGIC {
		s.r.noFDSize = true
		// Nor does a held file of a plain directory name one process.
		s.pool.max = 0
	}
	for i, wc := range cfg.Workers {
		k, err := newWorkerKind(i, wc)
		if err != nil {
			return nil, err
		}
		k.pool = &s.pool
		if id, name, ok := k.staticID(); ok {
			// A fixed id is expected to exist: report it absent until found.
			k.instances[id] = newWorker(k, id, name, s.now())
		}
		s.kinds = append(s.kinds, k)
	}
	tel, err := newTelemetry(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	s.tel = tel
	return s, nil
}

func (s *workerScraper) start(context.Context, component.Host) error {
	if _, err := os.Stat(s.cfg.ProcRoot); err != nil {
		return fmt.Errorf("proc_root: %w", err)
	}
	return s.startEvents()
}

// startEvents subscribes to the proc connector per process_events. Only a
// real procfs is paired with it (its pids are the kernel's; a fixture
// directory's are not).
func (s *workerScraper) startEvents() error {
	mode := s.cfg.ProcessEvents
	if mode == processEventsOff || mode == "" {
		return nil
	}
	if s.r.noFDSize { // proc_root is not a procfs
		if mode == processEventsNetlink {
			return fmt.Errorf("process_events: netlink needs proc_root (%s) to be the host's procfs", s.cfg.ProcRoot)
		}
		return nil
	}
	p, err := openProcEvents()
	if err != nil {
		if mode == processEventsNetlink {
			return fmt.Errorf("process_events: netlink: cannot subscribe to the kernel's process events (%w); the collector needs CAP_NET_ADMIN in the host's initial user and pid namespaces (root, or the capability granted), or set process_events: auto or off", err)
		}
		s.logOnce("process_events", "process events unavailable: children shorter than collection_interval are counted as a lower bound (sampling); grant the collector CAP_NET_ADMIN in the host's namespaces (and run it in the host pid namespace) for exact started/exited counts",
			zap.Error(err))
		return nil
	}
	s.ev = p
	return nil
}

func (s *workerScraper) shutdown(context.Context) error {
	if s.ev != nil {
		s.ev.close()
		s.ev = nil
	}
	s.releaseAll()
	s.tel.shutdown()
	return nil
}

// scrape reads every worker's tree once and emits one resource per worker.
func (s *workerScraper) scrape(ctx context.Context) (pmetric.Metrics, error) {
	began := time.Now()
	now := s.now()
	s.scrapeTime = now
	s.read, s.vanished, s.perms, s.scans, s.scanErr = 0, 0, 0, 0, nil
	s.ppidOK = false
	if s.ev != nil {
		s.bootOff = bootOffsetNs()
	}

	s.discover(now, false)
	rescan := false
	for _, k := range s.kinds {
		for _, w := range k.instances {
			if w.rootPid == 0 {
				continue
			}
			if !s.walk(w) {
				// The root exited: find where the worker went (a restart)
				// in this same scrape, so that it is not reported absent.
				w.rootPid, w.rootStart = 0, 0
				if k.sel == selMatch {
					k.needScan = true
				}
				rescan = true
			}
		}
	}
	if rescan {
		s.discover(now, true)
		for _, k := range s.kinds {
			for _, w := range k.instances {
				if w.rootPid != 0 && !w.walkedAt(now) {
					if !s.walk(w) {
						w.rootPid, w.rootStart = 0, 0
					}
				}
			}
		}
	}

	for _, k := range s.kinds {
		for id, w := range k.instances {
			if w.rootPid == 0 {
				w.settleAbsent()
				if w.absentSince.IsZero() {
					w.absentSince = now
				}
				if !k.idT.isStatic() && now.Sub(w.absentSince) > s.cfg.ForgetAfter {
					delete(k.instances, id)
					if s.ev != nil {
						s.ev.forget(w)
					}
					continue
				}
			} else {
				w.absentSince = time.Time{}
			}
			s.emit(w, now)
		}
	}

	if s.ev != nil {
		lost := s.ev.lost.Load()
		s.tel.recordEventsLost(ctx, lost-s.evLost)
		s.evLost = lost
		if s.ev.broken.Load() {
			s.ev.errMu.Lock()
			err := s.ev.err
			s.ev.errMu.Unlock()
			s.logOnce("process_events_broken", "reading process events failed; counting children shorter than collection_interval as a lower bound (sampling) from now on", zap.Error(err))
		}
	}
	s.tel.record(ctx, time.Since(began), s.read, s.vanished, s.perms, s.scans, s.pool.open)
	if s.scanErr != nil {
		return s.mb.Emit(), scrapererror.NewPartialScrapeError(fmt.Errorf("scanning %s: %w", s.cfg.ProcRoot, s.scanErr), 0)
	}
	return s.mb.Emit(), nil
}

// walkedAt reports whether the worker was walked in this scrape (the second
// pass after a rescan only walks the workers that got a new root).
func (w *worker) walkedAt(now time.Time) bool { return w.lastWalk.Equal(now) }

// settleAbsent moves every member of a worker without a root out of its
// tree, keeping their CPU in the accumulators (so a restart continues them).
func (w *worker) settleAbsent() {
	if len(w.members) == 0 {
		return
	}
	w.gen++
	w.sweep()
	w.hasPrev = false
}

// walk reads the worker's tree (or its cgroup) and updates its state. It
// returns false when the root is gone.
func (s *workerScraper) walk(w *worker) bool {
	var st procStat
	if err := s.statOf(w.members[w.rootPid], w.rootPid, &st); err != nil || st.starttime != w.rootStart || st.state == 'Z' {
		return false
	}
	w.gen++
	w.lastWalk = s.scrapeTime
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
		s.evExits, exact = s.ev.sync(w, s.evExits[:0])
		if exact && w.initialized {
			s.countUnseen(w)
		}
	}
	if !exact && w.initialized {
		w.estimateUnseen()
	}
	return true
}

// countUnseen counts the members that forked and exited without a scrape
// seeing them (from the proc connector), in the worker's default role. An
// exit of a pid this walk saw for the first time is the scrape's own (it
// counted that process's start, and counts its exit when it is gone), unless
// that process started after the exit (the pid was reused).
func (s *workerScraper) countUnseen(w *worker) {
	def := w.kind.defRole
	for _, e := range s.evExits {
		if m := w.members[e.pid]; m != nil && m.gen == w.gen && m.sightings == 1 &&
			m.start*(1e9/userHZ) <= e.ns+s.bootOff+2e9/userHZ {
			continue
		}
		w.started[def]++
		w.exited[def]++
	}
}

func (s *workerScraper) walkTree(w *worker, rootSt *procStat) {
	s.stack = append(s.stack[:0], w.rootPid)
	var st procStat
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
		if st.state == 'Z' || st.state == 'X' {
			continue
		}
		s.stack = s.childrenOf(m, pid, &st, s.stack)
	}
}

func (s *workerScraper) walkCgroup(w *worker, rootSt *procStat) {
	dir := s.cfg.CgroupRoot + "/" + w.cgroupRel
	s.cgPids = s.cgroupProcs(dir, s.cgPids[:0])
	var st procStat
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
func (s *workerScraper) memberStat(w *worker, m *member, pid int32, rootSt, st *procStat) bool {
	if pid == w.rootPid {
		*st = *rootSt
	} else if err := s.statOf(m, pid, st); err != nil {
		s.readErr(w, err)
		return false
	}
	return st.flags&pfKthread == 0
}

func (s *workerScraper) readErr(w *worker, err error) {
	if errors.Is(err, errPermission) {
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
func (s *workerScraper) childrenOf(m *member, pid int32, st *procStat, out []int32) []int32 {
	if s.noChildren {
		return s.childrenByPPID(pid, out)
	}
	if st.numThreads <= 1 {
		s.tidBuf = append(s.tidBuf[:0], pid)
	} else {
		var err error
		if s.tidBuf, err = s.tidsOf(m, pid, s.tidBuf[:0]); err != nil {
			return out
		}
	}
	s.pool.syncKids(&m.files, s.tidBuf)
	for i := range m.files.kids {
		k := &m.files.kids[i]
		var err error
		if out, err = s.childrenOfThread(k, pid, holds(m), out); err != nil && k.tid == pid {
			return s.childrenFallback(m, pid, err, out)
		}
	}
	return out
}

// childrenFallback tells a process that exited since its stat was read from
// a kernel without children files: the process is still there.
func (s *workerScraper) childrenFallback(m *member, pid int32, err error, out []int32) []int32 {
	if !errors.Is(err, errVanished) {
		return out
	}
	var st procStat
	if s.r.readStat(pid, &st) != nil || st.starttime != m.start {
		return out // the process itself is gone
	}
	s.logOnce("nochildren", "the kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN); finding children by a scan of all processes, whose cost grows with the host", zap.Int32("pid", pid))
	s.noChildren = true
	s.pool.release(&m.files)
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
	s.r.plainPath(s.cfg.ProcRoot)
	s.tidBuf, _ = s.r.dirPids(s.tidBuf[:0])
	s.ppidIdx = s.ppidIdx[:0]
	var st procStat
	for _, p := range s.tidBuf {
		if s.r.readStat(p, &st) == nil && st.flags&pfKthread == 0 {
			s.ppidIdx = append(s.ppidIdx, pidPair{ppid: st.ppid, pid: p})
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
func (s *workerScraper) account(w *worker, m *member, pid int32, st *procStat) *member {
	if m != nil && m.gen == w.gen && m.start == st.starttime {
		return nil
	}
	s.read++
	k := w.kind
	m, isNew := w.observe(m, pid, st)
	s.holdStat(m, pid)
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
		cmd, cmdErr = s.r.cmdline(pid)
	}
	switch {
	case isRoot:
		w.setRole(m, 0)
	case reread && (cmdErr == nil || isNew):
		// Classify by command line.
		role := k.classify(st.commString(), cmd)
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
	if st.state == 'Z' {
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
		if n, err := s.fdCountOf(m, pid); err == nil {
			w.fds[r] += n
		} else if errors.Is(err, errPermission) {
			s.perms++
			if !s.logged[k.keyFD] {
				s.permissionOnce(k.keyFD, "cannot count open files of a worker process (/proc/<pid>/fd); run the collector as the worker's user, as root, or grant it CAP_SYS_PTRACE; process.unix.file_descriptor.count leaves such processes out",
					zap.String("worker", k.key), zap.Int32("pid", pid))
			}
		}
	}
	if s.wantPSS && m.rss <= s.cfg.PSSMaxRSS {
		if v, err := s.r.pss(pid); err == nil {
			w.pss[r] += v
		} else if errors.Is(err, errPermission) {
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

func (s *workerScraper) emit(w *worker, now time.Time) {
	ts := pcommon.NewTimestampFromTime(now)
	rb := s.mb.NewResourceBuilder()
	rb.SetCicdWorkerID(w.id)
	if w.name != "" {
		rb.SetCicdWorkerName(w.name)
	}
	present := w.rootPid != 0
	if !present {
		s.mb.RecordWorkerwatchWorkerPresentDataPoint(ts, 0)
		s.mb.EmitForResource(metadata.WithResource(rb.Emit()), metadata.WithStartTimeOverride(w.startTime))
		return
	}
	s.mb.RecordWorkerwatchWorkerPresentDataPoint(ts, 1)
	elapsed := now.Sub(w.prevTime).Seconds()
	for r, role := range w.kind.roles {
		s.mb.RecordProcessMemoryUsageDataPoint(ts, w.rss[r], role)
		s.mb.RecordProcessCPUTimeDataPoint(ts, float64(w.cpuU[r])/userHZ, role, metadata.AttributeCPUModeUser)
		s.mb.RecordProcessCPUTimeDataPoint(ts, float64(w.cpuS[r])/userHZ, role, metadata.AttributeCPUModeSystem)
		total := w.cpuU[r] + w.cpuS[r]
		if w.hasPrev && elapsed > 0 && w.ncpu > 0 {
			util := float64(sat(total, w.prevCPU[r])) / userHZ / elapsed / w.ncpu
			s.mb.RecordProcessCPUUtilizationDataPoint(ts, util, role)
		}
		w.prevCPU[r] = total
		s.mb.RecordProcessThreadCountDataPoint(ts, w.threads[r], role)
		if s.wantFDs {
			s.mb.RecordProcessUnixFileDescriptorCountDataPoint(ts, w.fds[r], role)
		}
		s.mb.RecordWorkerwatchProcessCountDataPoint(ts, w.count[r], role)
		s.mb.RecordWorkerwatchProcessStartedDataPoint(ts, w.started[r], role)
		s.mb.RecordWorkerwatchProcessExitedDataPoint(ts, w.exited[r], role)
		if s.wantPSS {
			s.mb.RecordWorkerwatchProcessMemoryPssDataPoint(ts, w.pss[r], role)
		}
	}
	for _, e := range w.top {
		s.mb.RecordWorkerwatchProcessTopMemoryUsageDataPoint(ts, e.rss, int64(e.pid), string(e.comm[:e.n]), w.kind.roles[e.role], e.cmdline)
	}
	if w.cgroupDir != "" {
		s.emitCgroup(w, ts)
	}
	w.prevTime = now
	w.hasPrev = true
	w.initialized = true
	s.mb.EmitForResource(metadata.WithResource(rb.Emit()), metadata.WithStartTimeOverride(w.startTime))
}

// emitCgroup reads the worker's cgroup v2 memory files.
func (s *workerScraper) emitCgroup(w *worker, ts pcommon.Timestamp) {
	if b, err := s.r.readFile(w.cgroupDir + "/memory.current"); err == nil {
		if v, ok := parseCgroupMemory(b); ok {
			s.mb.RecordWorkerwatchCgroupMemoryCurrentDataPoint(ts, v)
		}
	}
	if b, err := s.r.readFile(w.cgroupDir + "/memory.max"); err == nil {
		if v, ok := parseCgroupMemory(b); ok {
			s.mb.RecordWorkerwatchCgroupMemoryMaxDataPoint(ts, v)
		}
	}
	if b, err := s.r.readFile(w.cgroupDir + "/memory.events"); err == nil {
		if v, ok := spaceField(b, "oom_kill"); ok {
			s.mb.RecordWorkerwatchCgroupMemoryOomKillsDataPoint(ts, v)
		}
	}
}
