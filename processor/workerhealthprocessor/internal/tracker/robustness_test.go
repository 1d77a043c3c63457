package tracker

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Issue 14.5: ids that are not valid UTF-8 are refused and counted as
// malformed. Before, "dup\xff" and "dup\xfe" were two workers that JSON (the
// health API, the checkpoint) showed as one id, "dup\ufffd".
func TestInvalidUTF8IdsAreMalformed(t *testing.T) {
	h := newHarness(t, testCfg())
	h.logs(wl("dup\xff", contract.EventHeartbeat, "", nil))
	h.logs(wl("dup\xfe", contract.EventClaimed, "r1", nil))
	h.logs(wl("ok", contract.EventClaimed, "run\xff", nil)) // a bad run id
	h.metrics(treeMetrics("tree\xc3", 10, -1, 1))
	sch := sl("ok", contract.EventClaimed, "r2")
	sch.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().PutStr(contract.AttrWorkerID, "sched\xff")
	h.logs(sch)
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Equal(t, int64(5), h.p.tracker.malformed)
	assert.Equal(t, 1, h.p.tracker.workers.len(), "only the valid id")
	require.NotNil(t, h.p.tracker.workers.get("ok"))
	assert.Zero(t, h.p.tracker.workers.get("ok").Table.Len(), "no run with an invalid id")
}

// memSample is one tree sample whose memory is a double.
func memSample(worker string, v float64, cgroupMax int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr(contract.AttrWorkerID, worker)
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	m := ms.AppendEmpty()
	m.SetName(contract.MetricMemory)
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(v)
	p := ms.AppendEmpty()
	p.SetName(contract.MetricPresent)
	p.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(1)
	if cgroupMax > 0 {
		c := ms.AppendEmpty()
		c.SetName(contract.MetricCgroupMemoryMax)
		c.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(cgroupMax)
	}
	return md
}

// Issue 14.7: a memory sample too large for int64 (1e300) is the largest
// int64, over any soft limit, not "no sample" (it read as 0, and the
// worker stayed healthy).
func TestHugeMemorySampleIsOverTheLimit(t *testing.T) {
	h := newHarness(t, testCfg()) // soft limit 1000 bytes, 3 samples
	for range 3 {
		h.metrics(memSample("w1", 1e300, 0))
		h.advance(sec)
	}
	h.eval()
	w := h.worker("w1")
	assert.Equal(t, int64(math.MaxInt64), w.memory.RSS())
	assert.Equal(t, unhealthy, w.State)
}

// Issue 14.7: a 1-byte cgroup limit makes a 1-byte soft limit (0.9 of it
// truncated to 0, which means "no limit", and the rule was off).
func TestTinyCgroupLimitKeepsTheSoftLimit(t *testing.T) {
	cfg := testCfg()
	cfg.Memory.SoftLimitBytes = 0
	cfg.Memory.SoftLimitRatio = 0.9
	h := newHarness(t, cfg)
	for range 3 {
		h.metrics(memSample("w1", 100, 1))
		h.advance(sec)
	}
	h.eval()
	h.p.mu.Lock()
	lim := h.p.tracker.workers.get("w1").memory.SoftLimit(h.p.tracker.mem)
	h.p.mu.Unlock()
	assert.Equal(t, int64(1), lim)
	assert.Equal(t, unhealthy, h.state("w1"))
}
