// Package pdatatest builds the logs and metrics the processor's tests feed,
// shared by the processor's packages (the top package drives the processor,
// internal/tracker the tracker behind the mapping). Test code only.
package pdatatest // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/pdatatest"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Rec describes one log record.
type Rec struct {
	Worker, Event, Run string
	Attrs              map[string]any
	TS                 time.Time
}

func putAttrs(m pcommon.Map, attrs map[string]any) {
	for k, v := range attrs {
		switch x := v.(type) {
		case string:
			m.PutStr(k, x)
		case int:
			m.PutInt(k, int64(x))
		case float64:
			m.PutDouble(k, x)
		case bool:
			m.PutBool(k, x)
		}
	}
}

// WorkerLogs builds a worker's own records (worker id on the resource).
func WorkerLogs(service string, recs ...Rec) plog.Logs {
	ld := plog.NewLogs()
	byWorker := map[string]plog.LogRecordSlice{}
	for _, r := range recs {
		lrs, ok := byWorker[r.Worker]
		if !ok {
			rl := ld.ResourceLogs().AppendEmpty()
			rl.Resource().Attributes().PutStr("service.name", service)
			rl.Resource().Attributes().PutStr("cicd.worker.id", r.Worker)
			lrs = rl.ScopeLogs().AppendEmpty().LogRecords()
			byWorker[r.Worker] = lrs
		}
		FillRec(lrs.AppendEmpty(), r)
	}
	return ld
}

// FillRec writes r's event, time, run id and attributes into lr (not its
// worker id).
func FillRec(lr plog.LogRecord, r Rec) {
	lr.SetEventName(r.Event)
	if !r.TS.IsZero() {
		lr.SetTimestamp(pcommon.NewTimestampFromTime(r.TS))
	}
	if r.Run != "" {
		lr.Attributes().PutStr("cicd.pipeline.run.id", r.Run)
	}
	putAttrs(lr.Attributes(), r.Attrs)
}

// SchedLogs builds the scheduler's records (worker id on each record).
func SchedLogs(recs ...Rec) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "workersim-scheduler")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for _, r := range recs {
		lr := lrs.AppendEmpty()
		FillRec(lr, r)
		lr.Attributes().PutStr("cicd.worker.id", r.Worker)
	}
	return ld
}

// WL is one record of a worker's own.
func WL(worker, event, run string, attrs map[string]any) plog.Logs {
	return WorkerLogs("worker", Rec{Worker: worker, Event: event, Run: run, Attrs: attrs})
}

// SL is one record of the scheduler's.
func SL(worker, event, run string) plog.Logs {
	return SchedLogs(Rec{Worker: worker, Event: event, Run: run})
}

// SnapLogs is a scheduler's snapshot of the runs it holds for one worker.
func SnapLogs(service, worker string, runs ...string) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", service)
	lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.SetEventName("workerwatch.scheduler.snapshot")
	lr.Attributes().PutStr("cicd.worker.id", worker)
	sl := lr.Attributes().PutEmptySlice("workerwatch.scheduler.runs")
	for _, r := range runs {
		sl.AppendEmpty().SetStr(r)
	}
	return ld
}

// TreeMetrics is one scrape of a worker tree: memory split over two roles;
// the main role's cpu utilization unless cpuMainFraction < 0, present unless
// it is < 0.
func TreeMetrics(worker string, mem int64, cpuMainFraction float64, present int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("cicd.worker.id", worker)
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	m := ms.AppendEmpty()
	m.SetName("process.memory.usage")
	mg := m.SetEmptyGauge()
	for _, role := range []string{"main", "child"} {
		dp := mg.DataPoints().AppendEmpty()
		dp.SetIntValue(mem / 2)
		dp.Attributes().PutStr("workerwatch.process.role", role)
	}
	if cpuMainFraction >= 0 {
		// A worker that may use 4 CPUs: utilization is a fraction of them.
		l := ms.AppendEmpty()
		l.SetName("workerwatch.worker.cpu.limit")
		l.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(4)
		c := ms.AppendEmpty()
		c.SetName("process.cpu.utilization")
		g := c.SetEmptyGauge()
		for _, role := range []string{"main", "child"} {
			dp := g.DataPoints().AppendEmpty()
			dp.SetDoubleValue(cpuMainFraction)
			if role == "child" {
				dp.SetDoubleValue(0.2)
			}
			dp.Attributes().PutStr("workerwatch.process.role", role)
		}
	}
	if present >= 0 {
		pm := ms.AppendEmpty()
		pm.SetName("workerwatch.worker.present")
		pm.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(present)
	}
	return md
}

// ActiveMetrics is w1's own count of the runs it holds.
func ActiveMetrics(n int64) pmetric.Metrics {
	return oneGauge("cicd.worker.id", "w1", "workerwatch.worker.runs.active", n)
}

// PendingMetrics is the scheduler's count of the runs no worker holds yet.
func PendingMetrics(n int64) pmetric.Metrics {
	return oneGauge("service.name", "workersim-scheduler", "workerwatch.scheduler.runs.pending", n)
}

// oneGauge is one integer gauge point on a resource of one attribute.
func oneGauge(key, value, name string, n int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr(key, value)
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName(name)
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(n)
	return md
}

// HeldMetrics is a scheduler's count of the runs it holds, per worker.
func HeldMetrics(service string, counts map[string]int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", service)
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("workerwatch.scheduler.runs.held")
	dps := m.SetEmptyGauge().DataPoints()
	for w, n := range counts {
		dp := dps.AppendEmpty()
		dp.SetIntValue(n)
		dp.Attributes().PutStr("cicd.worker.id", w)
	}
	return md
}

// Tree is one scrape of a worker's tree as the worker_process receiver
// sends it; zero values are left out (present is sent unless -1).
type Tree struct {
	Worker   string
	Roles    map[string]int64 // memory per role
	Present  int64            // 1, 0, or -1 = not sent
	CPUMain  float64          // utilization of the main role (a fraction of CPULimit); 0 = not sent
	CPULimit float64          // 0 = not sent
	OOM      int64            // cumulative oom kills, -1 = not sent
	Exited   map[string]int64 // cumulative exits per role
}

// Metrics is the scrape as the receiver's metrics.
func (x Tree) Metrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("cicd.worker.id", x.Worker)
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	perRole := func(name string, vals map[string]int64, sum bool) {
		if len(vals) == 0 {
			return
		}
		m := ms.AppendEmpty()
		m.SetName(name)
		dps := m.SetEmptyGauge().DataPoints()
		if sum {
			s := m.SetEmptySum()
			s.SetIsMonotonic(true)
			s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			dps = s.DataPoints()
		}
		for role, v := range vals {
			dp := dps.AppendEmpty()
			dp.SetIntValue(v)
			dp.Attributes().PutStr("workerwatch.process.role", role)
		}
	}
	one := func(name string, v float64) {
		m := ms.AppendEmpty()
		m.SetName(name)
		m.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(v)
	}
	perRole("process.memory.usage", x.Roles, false)
	perRole("workerwatch.process.exited", x.Exited, true)
	if x.Present >= 0 {
		one("workerwatch.worker.present", float64(x.Present))
	}
	if x.CPULimit > 0 {
		one("workerwatch.worker.cpu.limit", x.CPULimit)
	}
	if x.CPUMain > 0 {
		m := ms.AppendEmpty()
		m.SetName("process.cpu.utilization")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetDoubleValue(x.CPUMain)
		dp.Attributes().PutStr("workerwatch.process.role", "main")
	}
	if x.OOM > 0 {
		m := ms.AppendEmpty()
		m.SetName("workerwatch.cgroup.memory.oom_kills")
		m.SetEmptySum().DataPoints().AppendEmpty().SetIntValue(x.OOM)
	}
	return md
}
