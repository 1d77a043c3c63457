//go:build linux

package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

// What one scrape emits for a worker: one resource (cicd.worker.id) with
// every role's series.

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/procfs"
	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

func (s *workerScraper) emit(w *worker, now time.Time) {
	ts := pcommon.NewTimestampFromTime(now)
	rb := s.mb.NewResourceBuilder()
	rb.SetCicdWorkerID(w.id)
	if w.name != "" {
		rb.SetCicdWorkerName(w.name)
	}
	present := w.rootPid != 0
	if !present {
		setEnded(rb, &w.ended)
		s.mb.RecordWorkerwatchWorkerPresentDataPoint(ts, 0)
		if w.initialized {
			// A worker seen before keeps its cumulative series while it is
			// absent: the members that exited with its root are counted in
			// exited, and a restart continues them.
			s.emitCumulative(w, ts)
		}
		s.mb.EmitForResource(metadata.WithResource(rb.Emit()), metadata.WithStartTimeOverride(w.startTime))
		return
	}
	setIncarnation(rb, w.rootPid, w.created)
	s.mb.RecordWorkerwatchWorkerPresentDataPoint(ts, 1)
	s.emitCumulative(w, ts)
	if w.cpuLimit > 0 {
		s.mb.RecordWorkerwatchWorkerCPULimitDataPoint(ts, w.cpuLimit)
	}
	elapsed := now.Sub(w.prevTime).Seconds()
	for r, role := range w.kind.roles {
		s.mb.RecordProcessMemoryUsageDataPoint(ts, w.rss[r], role)
		total := w.cpuU[r] + w.cpuS[r]
		if w.hasPrev && elapsed > 0 && w.cpuLimit > 0 {
			cpu := float64(sat(total, w.prevCPU[r])) / procfs.UserHZ
			s.mb.RecordProcessCPUUtilizationDataPoint(ts, contract.Utilization(cpu, elapsed, w.cpuLimit), role)
		}
		w.prevCPU[r] = total
		s.mb.RecordProcessThreadCountDataPoint(ts, w.threads[r], role)
		if s.wantFDs {
			s.mb.RecordProcessUnixFileDescriptorCountDataPoint(ts, w.fds[r], role)
		}
		s.mb.RecordWorkerwatchProcessCountDataPoint(ts, w.count[r], role)
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

// emitCumulative records the worker's cumulative series per role: CPU time
// and processes started and exited.
func (s *workerScraper) emitCumulative(w *worker, ts pcommon.Timestamp) {
	for r, role := range w.kind.roles {
		s.mb.RecordProcessCPUTimeDataPoint(ts, float64(w.cpuU[r])/procfs.UserHZ, role, metadata.AttributeCPUModeUser)
		s.mb.RecordProcessCPUTimeDataPoint(ts, float64(w.cpuS[r])/procfs.UserHZ, role, metadata.AttributeCPUModeSystem)
		s.mb.RecordWorkerwatchProcessStartedDataPoint(ts, w.started[r], role)
		s.mb.RecordWorkerwatchProcessExitedDataPoint(ts, w.exited[r], role)
	}
}

// emitCgroup reads the worker's cgroup v2 memory files.
func (s *workerScraper) emitCgroup(w *worker, ts pcommon.Timestamp) {
	if v, ok := s.r.CgroupBytes(w.cgroupDir, "memory.current"); ok {
		s.mb.RecordWorkerwatchCgroupMemoryCurrentDataPoint(ts, v)
	}
	if v, ok := s.r.CgroupBytes(w.cgroupDir, "memory.max"); ok {
		s.mb.RecordWorkerwatchCgroupMemoryMaxDataPoint(ts, v)
	}
	if v, ok := s.r.CgroupKey(w.cgroupDir, "memory.events", "oom_kill"); ok {
		s.mb.RecordWorkerwatchCgroupMemoryOomKillsDataPoint(ts, v)
	}
}

// setIncarnation states the root process on the worker's resource: its pid
// and, where the boot time is known, when it started (created, formatted
// once per root by creationTime).
func setIncarnation(rb *metadata.ResourceBuilder, pid int32, created string) {
	rb.SetProcessPid(int64(pid))
	if created != "" {
		rb.SetProcessCreationTime(created)
	}
}

// creationTime is the process.creation.time of a process that started
// start ticks after boot ("" where the boot time is unknown).
func (s *workerScraper) creationTime(start uint64) string {
	if s.boot.IsZero() {
		return ""
	}
	return formatTime(procfs.StartTime(s.boot, start))
}

// setEnded states the root that ended on an absent worker's resource: its
// incarnation, when it exited and, where the kernel's exit event said, its
// exit code or the signal that ended it.
func setEnded(rb *metadata.ResourceBuilder, e *rootEnd) {
	if e.pid == 0 {
		return
	}
	setIncarnation(rb, e.pid, e.created)
	rb.SetProcessExitTime(e.exited)
	if e.exit.Pid == 0 {
		return
	}
	if sig, ok := e.exit.Signaled(); ok {
		rb.SetWorkerwatchProcessExitSignal(int64(sig))
	} else {
		rb.SetProcessExitCode(int64(e.exit.Code()))
	}
}

// formatTime is the ISO 8601 form of process.creation.time and
// process.exit.time: RFC 3339 in UTC, to the millisecond (contract.TimeLayout,
// the layout of every time the components state as strings).
func formatTime(t time.Time) string { return t.UTC().Format(contract.TimeLayout) }
