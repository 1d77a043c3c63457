//go:build linux

package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"errors"
	"path"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/procfs"
)

// rootInfo is a worker root found by a selector.
type rootInfo struct {
	pid       int32
	start     uint64
	cmdline   string
	cgroupRel string
}

// candidate is a process that matched a match selector during a scan.
type candidate struct {
	pid     int32
	start   uint64
	cmdline string
}

// discover finds the roots of every worker kind that needs it. Pid files and
// cgroup globs are cheap and read every scrape; match selectors need a full
// scan of the proc root, which runs only when a known root exited, when the
// selector matches nothing, or every discovery_interval to find new instances.
func (s *workerScraper) discover(now time.Time, force bool) {
	var scanKinds []*workerKind
	for _, k := range s.kinds {
		switch k.sel {
		case selPIDFile:
			s.discoverPIDFile(k, now)
		case selCgroup:
			s.discoverCgroups(k, now)
		case selMatch:
			if force && !k.needScan {
				continue
			}
			if k.needScan || now.Sub(k.lastScan) >= s.cfg.DiscoveryInterval || !k.anyPresent() {
				scanKinds = append(scanKinds, k)
			}
		}
	}
	if len(scanKinds) > 0 {
		s.scanMatches(scanKinds, now)
	}
}

func (k *workerKind) anyPresent() bool {
	for _, w := range k.instances {
		if w.rootPid != 0 {
			return true
		}
	}
	return false
}

func (s *workerScraper) discoverPIDFile(k *workerKind, now time.Time) {
	var roots []rootInfo
	path := k.cfg.Selector.PIDFile
	pid, err := s.r.ReadPIDFile(path)
	var st procfs.Stat
	switch {
	case errors.Is(err, procfs.ErrPermission):
		s.permissionOnce(k.key+"/pidfile", "cannot read the pid file; make it readable by the collector's user", zap.String("pid_file", path))
	case errors.Is(err, procfs.ErrVanished):
		s.pidFileAbsent(k, "pid file not found; reporting the worker absent (workerwatch.worker.present = 0) until it appears", zap.String("pid_file", path))
	case err != nil:
		s.pidFileAbsent(k, "cannot read the pid file; reporting the worker absent (workerwatch.worker.present = 0)", zap.String("pid_file", path), zap.Error(err))
	case pid == 0:
		s.pidFileAbsent(k, "the pid file holds no pid; reporting the worker absent (workerwatch.worker.present = 0)", zap.String("pid_file", path))
	case s.r.ReadStat(pid, &st) != nil || st.State == 'Z':
		s.pidFileAbsent(k, "the pid file names no live process; reporting the worker absent (workerwatch.worker.present = 0)", zap.String("pid_file", path), zap.Int32("pid", pid))
	default:
		roots = append(roots, rootInfo{pid: pid, start: st.Starttime})
		k.pidFileWhy = ""
	}
	s.reconcile(k, roots, now)
}

// pidFileAbsent logs why a pid file selector matches nothing, naming the
// file: once per reason, again only after the worker was found in between
// or the reason changed (not on every scrape).
func (s *workerScraper) pidFileAbsent(k *workerKind, why string, fields ...zap.Field) {
	if k.pidFileWhy == why {
		return
	}
	k.pidFileWhy = why
	s.logger.Info(why, append([]zap.Field{zap.String("worker", k.key)}, fields...)...)
}

// discoverCgroups lists the cgroups matching the selector; each one with at
// least one process is a worker whose root is its oldest process whose parent
// is outside the cgroup.
func (s *workerScraper) discoverCgroups(k *workerKind, now time.Time) {
	pattern := filepath.Join(s.cfg.CgroupRoot, k.cfg.Selector.Cgroup)
	dirs, _ := filepath.Glob(pattern)
	var roots []rootInfo
	for _, dir := range dirs {
		rel, err := filepath.Rel(s.cfg.CgroupRoot, dir)
		if err != nil {
			continue
		}
		pids := s.r.CgroupProcs(dir, s.cgPids[:0])
		s.cgPids = pids
		clear(s.cgSet)
		for _, p := range pids {
			s.cgSet[p] = struct{}{}
		}
		var best rootInfo
		var st procfs.Stat
		// Keep a known root that is still alive in the cgroup: the common case
		// costs one stat read instead of one per member.
		kept := false
		for _, w := range k.instances {
			if w.cgroupRel == rel && w.rootPid != 0 {
				if _, inside := s.cgSet[w.rootPid]; inside && s.r.ReadStat(w.rootPid, &st) == nil && st.Starttime == w.rootStart && st.State != 'Z' {
					best = rootInfo{pid: w.rootPid, start: w.rootStart, cgroupRel: rel}
					kept = true
				}
			}
		}
		for _, p := range pids {
			if kept {
				break
			}
			if s.r.ReadStat(p, &st) != nil || st.State == 'Z' {
				continue
			}
			if _, inside := s.cgSet[st.PPID]; inside {
				continue
			}
			if best.pid == 0 || st.Starttime < best.start || (st.Starttime == best.start && p < best.pid) {
				best = rootInfo{pid: p, start: st.Starttime, cgroupRel: rel}
			}
		}
		if best.pid != 0 {
			roots = append(roots, best)
		}
	}
	s.reconcile(k, roots, now)
}

// scanMatches walks the whole proc root once for all match selectors that
// need it. Its cost grows with the host's process count, which is why it runs
// rarely (see discover).
func (s *workerScraper) scanMatches(kinds []*workerKind, now time.Time) {
	s.scans++
	clear(s.scanPPID)
	cands := make([][]candidate, len(kinds))
	pids, err := s.r.Pids(nil)
	if err != nil {
		s.scanErr = err
		return
	}
	var st procfs.Stat
	for _, pid := range pids {
		if s.r.ReadStat(pid, &st) != nil || st.KernelThread() || st.State == 'Z' {
			continue
		}
		s.scanPPID[pid] = st.PPID
		comm := st.CommString()
		cmdline, cmdRead := "", false
		for i, k := range kinds {
			if k.exe != "" && !exeMatches(k.exe, comm, "") {
				// comm may differ from argv[0] (scripts, renamed threads):
				// fall back to argv[0] only when comm did not match.
				if !cmdRead {
					cmdline, _ = s.r.Cmdline(pid)
					cmdRead = true
				}
				if !exeMatches(k.exe, "", cmdline) {
					continue
				}
			}
			if k.re != nil {
				if !cmdRead {
					cmdline, _ = s.r.Cmdline(pid)
					cmdRead = true
				}
				if !k.re.MatchString(cmdline) {
					continue
				}
			}
			cands[i] = append(cands[i], candidate{pid: pid, start: st.Starttime, cmdline: cmdline})
		}
	}
	for i, k := range kinds {
		k.lastScan = now
		k.needScan = false
		matched := map[int32]bool{}
		for _, c := range cands[i] {
			matched[c.pid] = true
		}
		var roots []rootInfo
		for _, c := range cands[i] {
			// A match below another match is part of that worker's tree (a
			// forked copy of the worker, or the worker run through a wrapper).
			if s.hasMatchedAncestor(c.pid, matched) {
				continue
			}
			roots = append(roots, rootInfo{pid: c.pid, start: c.start, cmdline: c.cmdline})
		}
		s.reconcile(k, roots, now)
	}
}

func (s *workerScraper) hasMatchedAncestor(pid int32, matched map[int32]bool) bool {
	p := s.scanPPID[pid]
	for depth := 0; p > 0 && depth < 128; depth++ {
		if matched[p] {
			return true
		}
		p = s.scanPPID[p]
	}
	return false
}

// reconcile turns a kind's roots into worker instances (by rendered id) and
// marks the others absent. A restarted worker keeps its id (from a capture,
// the environment or fixed text) and so its state: its counters continue.
func (s *workerScraper) reconcile(k *workerKind, roots []rootInfo, now time.Time) {
	found := map[string]rootInfo{}
	for _, r := range roots {
		vals := templateValues{pid: r.pid, cgroup: path.Base(r.cgroupRel)}
		if k.re != nil && r.cmdline != "" {
			vals.captures = k.re.FindStringSubmatch(r.cmdline)
		}
		if len(k.envs) > 0 {
			vals.env = map[string]string{}
			for _, name := range k.envs {
				v, ok, err := s.r.Environ(r.pid, name)
				if errors.Is(err, procfs.ErrPermission) {
					s.permissionOnce(k.key+"/environ", "cannot read the root's environment for the id template; run the collector as the worker's user or as root", zap.Int32("pid", r.pid))
				}
				if ok {
					vals.env[name] = v
				}
			}
		}
		id, ok := k.idT.render(&vals)
		if !ok {
			// Once per worker entry, not per root: a key per command line
			// would keep every unnamed root's command line for good.
			s.logOnce(k.key+"/unnamed", "worker root skipped: its id template has no value for it (unset environment variable or empty capture)",
				zap.String("worker", k.key), zap.Int32("pid", r.pid))
			continue
		}
		if prev, dup := found[id]; dup {
			s.logOnce(k.key+"/dup/"+id, "two processes render the same worker id; keeping the older one",
				zap.String("worker", k.key), zap.String("id", id), zap.Int32("pid", prev.pid), zap.Int32("other_pid", r.pid))
			if prev.start < r.start || (prev.start == r.start && prev.pid < r.pid) {
				continue
			}
		}
		name := ""
		if k.nameT != nil {
			name, _ = k.nameT.render(&vals)
		}
		found[id] = r
		w := k.instances[id]
		if w == nil {
			w = newWorker(k, id, name, now)
			k.instances[id] = w
		}
		if name != "" {
			w.name = name
		}
		if w.ended.pid == r.pid && w.ended.start == r.start {
			// The root that ended, still in /proc while it exits (the
			// kernel's exit event comes first): not adopted again.
			continue
		}
		if w.rootPid != r.pid || w.rootStart != r.start || w.cgroupRel != r.cgroupRel {
			s.setRoot(w, r)
		}
	}
	for id, w := range k.instances {
		if _, ok := found[id]; !ok && w.rootPid != 0 {
			s.rootGone(w, now)
		}
	}
	// A pid file selector says why it matches nothing itself (pidFileAbsent).
	if len(found) == 0 && k.sel != selPIDFile {
		s.logOnce(k.key+"/absent", "worker selector matches no process; reporting it absent (workerwatch.worker.present = 0)", zap.String("worker", k.key))
	} else {
		delete(s.logged, k.key+"/absent")
	}
}

// setRoot adopts a (new) root process and where its cgroup v2 is.
func (s *workerScraper) setRoot(w *worker, r rootInfo) {
	w.rootPid, w.rootStart, w.cgroupRel = r.pid, r.start, r.cgroupRel
	w.created = s.creationTime(r.start)
	w.cgroupDir, w.cgroupV2 = "", ""
	w.ended = rootEnd{}
	if s.ev != nil {
		// Watch the root's exit (exitScrapes, rootGone).
		if w.evg == nil {
			w.evg = s.ev.NewGroup()
		}
		s.ev.SetRoot(w.evg, r.pid)
	}
	rel := r.cgroupRel
	if rel == "" {
		rel, _ = s.r.CgroupPath(r.pid)
	}
	// The root cgroup "/" is the whole host: its figures are not the worker's.
	if rel != "" && rel != "/" && rel != "." {
		w.cgroupV2 = rel
		dir := filepath.Join(s.cfg.CgroupRoot, rel)
		if _, err := s.r.ReadFile(dir + "/memory.current"); err == nil {
			w.cgroupDir = dir
		}
	}
}
