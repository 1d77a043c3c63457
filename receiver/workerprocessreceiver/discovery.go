package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"errors"
	"path"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
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
	b, err := s.r.readFile(k.cfg.Selector.PIDFile)
	switch {
	case errors.Is(err, errPermission):
		s.permissionOnce(k.key+"/pidfile", "cannot read the pid file; make it readable by the collector's user", zap.String("pid_file", k.cfg.Selector.PIDFile))
	case err == nil:
		pid := parsePIDFile(b)
		var st procStat
		if pid > 0 && s.r.readStat(pid, &st) == nil && st.state != 'Z' {
			roots = append(roots, rootInfo{pid: pid, start: st.starttime})
		}
	}
	s.reconcile(k, roots, now)
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
		pids := s.cgroupProcs(dir, s.cgPids[:0])
		s.cgPids = pids
		clear(s.cgSet)
		for _, p := range pids {
			s.cgSet[p] = struct{}{}
		}
		var best rootInfo
		var st procStat
		// Keep a known root that is still alive in the cgroup: the common case
		// costs one stat read instead of one per member.
		kept := false
		for _, w := range k.instances {
			if w.cgroupRel == rel && w.rootPid != 0 {
				if _, inside := s.cgSet[w.rootPid]; inside && s.r.readStat(w.rootPid, &st) == nil && st.starttime == w.rootStart && st.state != 'Z' {
					best = rootInfo{pid: w.rootPid, start: w.rootStart, cgroupRel: rel}
					kept = true
				}
			}
		}
		for _, p := range pids {
			if kept {
				break
			}
			if s.r.readStat(p, &st) != nil || st.state == 'Z' {
				continue
			}
			if _, inside := s.cgSet[st.ppid]; inside {
				continue
			}
			if best.pid == 0 || st.starttime < best.start || (st.starttime == best.start && p < best.pid) {
				best = rootInfo{pid: p, start: st.starttime, cgroupRel: rel}
			}
		}
		if best.pid != 0 {
			roots = append(roots, best)
		}
	}
	s.reconcile(k, roots, now)
}

// cgroupProcs appends the pids of a cgroup and all its descendant cgroups.
func (s *workerScraper) cgroupProcs(dir string, out []int32) []int32 {
	b, err := s.r.readFile(dir + "/cgroup.procs")
	if err != nil {
		return out
	}
	out = parsePidList(b, out)
	var subdirs []string
	s.r.plainPath(dir)
	_ = s.r.forEachDirent(func(name []byte, typ byte) {
		if typ == unix.DT_DIR {
			subdirs = append(subdirs, string(name))
		}
	})
	for _, d := range subdirs {
		out = s.cgroupProcs(dir+"/"+d, out)
	}
	return out
}

// scanMatches walks the whole proc root once for all match selectors that
// need it. Its cost grows with the host's process count, which is why it runs
// rarely (see discover).
func (s *workerScraper) scanMatches(kinds []*workerKind, now time.Time) {
	s.scans++
	clear(s.scanPPID)
	cands := make([][]candidate, len(kinds))
	s.r.plainPath(s.cfg.ProcRoot)
	pids, err := s.r.dirPids(nil)
	if err != nil {
		s.scanErr = err
		return
	}
	var st procStat
	for _, pid := range pids {
		if s.r.readStat(pid, &st) != nil || st.flags&pfKthread != 0 || st.state == 'Z' {
			continue
		}
		s.scanPPID[pid] = st.ppid
		comm := st.commString()
		cmdline, cmdRead := "", false
		for i, k := range kinds {
			if k.exe != "" && !exeMatches(k.exe, comm, "") {
				// comm may differ from argv[0] (scripts, renamed threads):
				// fall back to argv[0] only when comm did not match.
				if !cmdRead {
					cmdline, _ = s.r.cmdline(pid)
					cmdRead = true
				}
				if !exeMatches(k.exe, "", cmdline) {
					continue
				}
			}
			if k.re != nil {
				if !cmdRead {
					cmdline, _ = s.r.cmdline(pid)
					cmdRead = true
				}
				if !k.re.MatchString(cmdline) {
					continue
				}
			}
			cands[i] = append(cands[i], candidate{pid: pid, start: st.starttime, cmdline: cmdline})
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
				v, ok, err := s.r.environ(r.pid, name)
				if errors.Is(err, errPermission) {
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
		if w.rootPid != r.pid || w.rootStart != r.start || w.cgroupRel != r.cgroupRel {
			s.setRoot(w, r)
		}
	}
	for id, w := range k.instances {
		if _, ok := found[id]; !ok && w.rootPid != 0 {
			w.rootPid, w.rootStart = 0, 0
		}
	}
	if len(found) == 0 {
		s.logOnce(k.key+"/absent", "worker selector matches no process; reporting it absent (workerwatch.worker.present = 0)", zap.String("worker", k.key))
	} else {
		delete(s.logged, k.key+"/absent")
	}
}

// setRoot adopts a (new) root process: where its cgroup v2 is, and how many
// CPUs it may use (for utilization).
func (s *workerScraper) setRoot(w *worker, r rootInfo) {
	w.rootPid, w.rootStart, w.cgroupRel = r.pid, r.start, r.cgroupRel
	w.cgroupDir = ""
	rel := r.cgroupRel
	if rel == "" {
		s.r.pidPath(r.pid, "cgroup")
		if b, err := s.r.readPath(); err == nil {
			rel = cgroupV2Path(b)
		}
	}
	// The root cgroup "/" is the whole host: its figures are not the worker's.
	if rel != "" && rel != "/" && rel != "." {
		dir := filepath.Join(s.cfg.CgroupRoot, rel)
		if _, err := s.r.readFile(dir + "/memory.current"); err == nil {
			w.cgroupDir = dir
		}
	}
	w.ncpu = s.defaultNCPU
	s.r.pidPath(r.pid, "status")
	if b, err := s.r.readPath(); err == nil {
		if v, ok := statusLine(b, "Cpus_allowed_list"); ok {
			if n := countCPUList(v); n > 0 {
				w.ncpu = float64(n)
			}
		}
	}
	if w.cgroupDir != "" {
		if b, err := s.r.readFile(w.cgroupDir + "/cpu.max"); err == nil {
			if n, ok := parseCPUMax(b); ok && n < w.ncpu {
				w.ncpu = n
			}
		}
	}
}
