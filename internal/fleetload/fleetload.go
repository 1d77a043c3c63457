// Package fleetload builds the records a synthetic fleet's agent forwards,
// for the tests that measure a shard under issue 24's load (TestDensity,
// TestScaleFigures): one shape in one place, so that both measure the same
// input.
package fleetload // import "github.com/workerwatch/workerwatch/internal/fleetload"

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// TreeSample appends worker i's tree sample (id its worker id) as the
// worker_process receiver forwards it: the worker on the resource, the
// main role's memory and CPU, the CPU limit and workerwatch.worker.present
// = 1, all at now. Its values vary with i as a fleet's do (a host every 100
// workers).
func TreeSample(md pmetric.Metrics, id string, i int, now pcommon.Timestamp) {
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr(contract.AttrWorkerID, id)
	rm.Resource().Attributes().PutStr(contract.AttrWorkerName, id)
	rm.Resource().Attributes().PutStr("host.name", fmt.Sprintf("fleet-host-%03d", i/100))
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
	mem.SetIntValue(int64(200+i%50) << 20)
	mem.Attributes().PutStr(contract.AttrRole, contract.RoleMain)
	cpu := gauge(contract.MetricCPUUtilization, "1")
	cpu.SetDoubleValue(0.05 + float64(i%10)/100)
	cpu.Attributes().PutStr(contract.AttrRole, contract.RoleMain)
	gauge(contract.MetricCPULimit, "{cpu}").SetDoubleValue(2)
	gauge(contract.MetricPresent, "1").SetIntValue(1)
}
