// Package fleetload builds the records a synthetic fleet's agent forwards,
// for the tests that measure a shard under issue 24's load (TestDensity,
// TestScaleFigures, the checkpoint's TestCheckpointGroupSize): one shape in
// one place, so that they measure the same input.
package fleetload // import "github.com/workerwatch/workerwatch/internal/fleetload"

import (
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// TreeSample appends worker i's tree sample (id its worker id) as the
// worker_process receiver forwards it: the worker and its root process's
// incarnation (process.pid, process.creation.time) on the resource, the
// main role's memory and CPU, the CPU limit and workerwatch.worker.present
// = 1, all at now. Its values vary with i as a fleet's do (a host every 100
// workers, the root started an hour before the load), and the memory with
// now too.
func TreeSample(md pmetric.Metrics, id string, i int, now pcommon.Timestamp) {
	rm := md.ResourceMetrics().AppendEmpty()
	attrs := rm.Resource().Attributes()
	attrs.PutStr(contract.AttrWorkerID, id)
	attrs.PutStr(contract.AttrWorkerName, id)
	attrs.PutStr("host.name", fmt.Sprintf("fleet-host-%03d", i/100))
	attrs.PutInt(contract.AttrPID, int64(1000+i%30000))
	attrs.PutStr(contract.AttrProcessCreationTime, rootStarted.Add(time.Duration(i)*time.Millisecond).Format(contract.TimeLayout))
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("github.com/workerwatch/workerwatch/receiver/workerprocessreceiver")
	ms := sm.Metrics()
	gauge := func(name, unit string) pmetric.NumberDataPoint {
		m := ms.AppendEmpty()
		m.SetName(name)
		m.SetUnit(unit)
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(now)
		return dp
	}
	mem := gauge(contract.MetricMemory, "By")
	// A real RSS moves from one sample to the next: some pages more or
	// fewer each time (the worker's memory would otherwise be the same list
	// of roles in every snapshot, which no fleet sends).
	mem.SetIntValue(int64(200+i%50)<<20 + int64(now)/int64(time.Second)%97<<12)
	mem.Attributes().PutStr(contract.AttrRole, contract.RoleMain)
	cpu := gauge(contract.MetricCPUUtilization, "1")
	cpu.SetDoubleValue(0.05 + float64(i%10)/100)
	cpu.Attributes().PutStr(contract.AttrRole, contract.RoleMain)
	gauge(contract.MetricCPULimit, "{cpu}").SetDoubleValue(2)
	gauge(contract.MetricPresent, "1").SetIntValue(1)
}

// rootStarted is when the fleet's root processes started: one instant for
// every round (an incarnation is stable while its process lives), an hour
// before the process that sends the load started.
var rootStarted = time.Now().Add(-time.Hour).UTC().Truncate(time.Second)

// Scheduler appends the scheduler's resource (service.name "scheduler") to
// ld and returns the slice its records go to (Round).
func Scheduler(ld plog.Logs) plog.LogRecordSlice {
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr(contract.AttrServiceName, "scheduler")
	return rl.ScopeLogs().AppendEmpty().LogRecords()
}

// Round appends what an agent forwards for worker i (id) in one round of
// issue 24's load: its tree sample to md (at now), and at ts, on a resource
// of the worker's own in ld, a heartbeat (capacity 2), the end of its
// previous run prev ("" for none) and the claim and start of run; to sched
// (Scheduler), the scheduler's end of prev and claim of run.
func Round(md pmetric.Metrics, ld plog.Logs, sched plog.LogRecordSlice, id string, i int, prev, run string, now, ts pcommon.Timestamp) {
	TreeSample(md, id, i, now)
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr(contract.AttrServiceName, "fleet-worker")
	rl.Resource().Attributes().PutStr(contract.AttrWorkerID, id)
	own := rl.ScopeLogs().AppendEmpty().LogRecords()
	rec := func(lrs plog.LogRecordSlice, event, run string) plog.LogRecord {
		lr := lrs.AppendEmpty()
		lr.SetEventName(event)
		lr.SetTimestamp(ts)
		if run != "" {
			lr.Attributes().PutStr(contract.AttrRunID, run)
		}
		if lrs == sched {
			lr.Attributes().PutStr(contract.AttrWorkerID, id)
		}
		return lr
	}
	rec(own, contract.EventHeartbeat, "").Attributes().PutInt(contract.AttrCapacity, 2)
	if prev != "" {
		rec(own, contract.EventFinished, prev).Attributes().PutStr(contract.AttrResult, contract.ResultSuccess)
		rec(sched, contract.EventFinished, prev).Attributes().PutStr(contract.AttrResult, contract.ResultSuccess)
	}
	rec(sched, contract.EventClaimed, run)
	rec(own, contract.EventClaimed, run)
	rec(own, contract.EventStarted, run)
}
