package mapping

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// settings is a mapping as the processor's defaults resolve it: one
// "events" scheduler named "scheduler".
func settings() *Settings {
	return &Settings{
		Mapping: &Config{
			WorkerIDAttributes: []string{contract.AttrWorkerID}, WorkerNameAttribute: contract.AttrWorkerName,
			RunIDAttribute: contract.AttrRunID, ResultAttribute: contract.AttrResult, KillReasonAttribute: contract.AttrKillReason,
			CapacityAttribute: contract.AttrCapacity, RunSpanName: contract.SpanRun, StageSpanNames: []string{contract.SpanCompile},
			Events: EventNames{Claimed: []string{contract.EventClaimed}, Killed: []string{contract.EventKilled}},
		},
		Metrics: &MetricsConfig{
			Memory: contract.MetricMemory, Present: contract.MetricPresent, Pending: contract.MetricSchedulerPending,
			RoleAttribute: contract.AttrRole, MainRole: contract.RoleMain,
		},
		Schedulers: []Scheduler{{Name: "scheduler", View: contract.ViewEvents, Keys: []string{contract.AttrWorkerID}, Interval: time.Minute, Life: LifeClaims}},
		IDKeys:     []string{contract.AttrWorkerID}, MaxAttributeLength: 16,
	}
}

func TestLogs(t *testing.T) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr(contract.AttrWorkerID, "w1")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	claimed := lrs.AppendEmpty()
	claimed.SetEventName(contract.EventClaimed)
	claimed.SetTimestamp(5)
	claimed.Attributes().PutStr(contract.AttrRunID, "r1")
	claimed.Attributes().PutInt(contract.AttrCapacity, 2)
	killed := lrs.AppendEmpty()
	killed.SetEventName(contract.EventKilled)
	killed.Attributes().PutStr(contract.AttrRunID, "r1")
	killed.Attributes().PutStr(contract.AttrKillReason, contract.KillOOM)
	noRun := lrs.AppendEmpty()
	noRun.SetEventName(contract.EventClaimed)
	tooLong := lrs.AppendEmpty()
	tooLong.SetEventName(contract.EventClaimed)
	tooLong.Attributes().PutStr(contract.AttrRunID, "a run id longer than 16 bytes")

	b := NewBatch()
	New(settings()).Logs(ld, b)
	require.Len(t, b.Events, 3)
	assert.Equal(t, Event{Worker: "w1", Kind: KindSeen, Capacity: -1, Key: 0}, b.Events[0], "a worker's resource is a sign of life")
	assert.Equal(t, Event{Worker: "w1", Run: "r1", Kind: KindClaimed, TS: 5, Capacity: 2}, b.Events[1])
	assert.Equal(t, KindKilled, b.Events[2].Kind)
	assert.Equal(t, contract.KillOOM, b.Events[2].KillReason)
	assert.Equal(t, int64(2), b.Malformed, "a claim without a run id, a run id over max_attribute_length")
}

func TestTracesAndMetrics(t *testing.T) {
	m := New(settings())
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(contract.AttrWorkerID, "w1")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName(contract.SpanCompile)
	sp.SetStartTimestamp(1)
	sp.SetEndTimestamp(3)
	b := NewBatch()
	m.Traces(td, b)
	require.Len(t, b.Events, 2)
	assert.Equal(t, KindStage, b.Events[1].Kind)
	assert.Equal(t, int64(2), b.Events[1].TS-b.Events[1].StartTS)

	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr(contract.AttrWorkerID, "w1")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	mem := ms.AppendEmpty()
	mem.SetName(contract.MetricMemory)
	g := mem.SetEmptyGauge()
	for _, role := range []string{contract.RoleMain, "child"} {
		dp := g.DataPoints().AppendEmpty()
		dp.SetIntValue(100)
		dp.Attributes().PutStr(contract.AttrRole, role)
	}
	present := ms.AppendEmpty()
	present.SetName(contract.MetricPresent)
	present.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(1)
	sched := md.ResourceMetrics().AppendEmpty()
	sched.Resource().Attributes().PutStr(contract.AttrServiceName, "scheduler")
	pending := sched.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	pending.SetName(contract.MetricSchedulerPending)
	pending.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(7)
	b = NewBatch()
	m.Metrics(md, b)
	require.Len(t, b.Samples, 1)
	s := b.Samples[0]
	assert.True(t, s.Tree, "present marks the receiver's tree")
	assert.Equal(t, int8(1), s.Present)
	assert.Equal(t, int64(200), s.Mem, "the tree's memory is the sum of its roles")
	assert.Equal(t, 2, s.NRole)
	assert.Equal(t, RoleVal{Role: contract.RoleMain, RSS: 100}, s.Roles[0])
	assert.Equal(t, int64(7), b.Pending)
	assert.True(t, b.SchedulerSeen)
}
