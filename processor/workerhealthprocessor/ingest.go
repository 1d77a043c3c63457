package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// mapper turns pdata into events and samples. It only reads the data (the
// processor never mutates what passes through) and is safe for concurrent
// use: it holds only the compiled configuration.
type mapper struct {
	cfg        *Config
	kinds      map[string]kind
	schedulers []string
	killResult map[string]bool
	maxLen     int
}

func newMapper(cfg *Config) *mapper {
	m := &mapper{
		cfg: cfg, kinds: map[string]kind{}, killResult: map[string]bool{}, maxLen: cfg.Limits.MaxAttributeLength,
		schedulers: cfg.Scheduler.ServiceNames,
	}
	ev := cfg.Mapping.Events
	for k, names := range map[kind][]string{
		evClaimed: ev.Claimed, evStarted: ev.Started, evFinished: ev.Finished,
		evKilled: ev.Killed, evReleased: ev.Released, evHeartbeat: ev.Heartbeat,
	} {
		for _, n := range names {
			m.kinds[n] = k
		}
	}
	for _, r := range cfg.Mapping.KillResults {
		m.killResult[r] = true
	}
	return m
}

// str reads a string attribute. ok=false means present but malformed (wrong
// type, empty or oversized); absent is ("", true).
func (m *mapper) str(attrs pcommon.Map, key string) (string, bool) {
	v, found := attrs.Get(key)
	if !found {
		return "", true
	}
	if v.Type() != pcommon.ValueTypeStr {
		return "", false
	}
	s := v.Str()
	if s == "" || len(s) > m.maxLen {
		return "", false
	}
	return s, true
}

// intAttr reads a small non-negative int attribute (or a double, as some SDKs
// send); -1 when absent or out of range.
func intAttr(attrs pcommon.Map, key string) int {
	v, ok := attrs.Get(key)
	if !ok {
		return -1
	}
	switch v.Type() {
	case pcommon.ValueTypeInt:
		if n := v.Int(); n >= 0 && n < 1<<20 {
			return int(n)
		}
	case pcommon.ValueTypeDouble:
		if n := v.Double(); n >= 0 && n < 1<<20 {
			return int(n)
		}
	}
	return -1
}

// resource says whose view a resource is, and its worker id when it
// names one (a worker's resource does; a scheduler's usually does not).
func (m *mapper) resource(res pcommon.Resource) (src source, id, name string, ok bool) {
	attrs := res.Attributes()
	if sn, found := attrs.Get(contract.AttrServiceName); found && sn.Type() == pcommon.ValueTypeStr {
		s := sn.Str()
		for _, n := range m.schedulers {
			if n == s {
				src = srcScheduler
				break
			}
		}
	}
	id, ok = m.str(attrs, m.cfg.Mapping.WorkerIDAttribute)
	if ok {
		name, _ = m.str(attrs, m.cfg.Mapping.WorkerNameAttribute)
	}
	return src, id, name, ok
}

// fillRun reads the run attributes shared by log records and spans. It
// returns false when the record is malformed.
func (m *mapper) fillRun(e *event, attrs pcommon.Map) bool {
	mp := &m.cfg.Mapping
	var ok bool
	if e.src == srcScheduler || e.worker == "" {
		// The scheduler names the worker on each record; a worker may too.
		if id, okID := m.str(attrs, mp.WorkerIDAttribute); !okID {
			return false
		} else if id != "" {
			e.worker = id
		}
	}
	if e.worker == "" {
		return false
	}
	e.capacity = intAttr(attrs, mp.CapacityAttribute)
	if e.kind == evHeartbeat {
		return true
	}
	if e.run, ok = m.str(attrs, mp.RunIDAttribute); !ok || e.run == "" {
		return false
	}
	if e.kind != evFinished && e.kind != evKilled {
		return true
	}
	raw, _ := m.str(attrs, mp.ResultAttribute)
	errType, _ := m.str(attrs, mp.ErrorTypeAttribute)
	reason, _ := m.str(attrs, mp.KillReasonAttribute)
	if m.killResult[raw] {
		e.kind = evKilled
	}
	if e.kind == evKilled && reason == "" {
		reason = mp.ErrorTypeKillReasons[errType]
	}
	e.killReason = reason
	if r, found := mp.ResultValues[raw]; found {
		raw = r
	}
	e.result = raw
	return true
}

// seen reads a resource's identity for the logs and traces paths: a resource
// without a usable identity is malformed; a scheduler's marks the batch as
// carrying the scheduler's view; a worker's counts as a sign of life.
func (m *mapper) seen(res pcommon.Resource, b *batch) (src source, rid, name string, ok bool) {
	src, rid, name, ok = m.resource(res)
	switch {
	case !ok:
		b.malformed++
	case src == srcScheduler:
		b.schedulerSeen = true
	case rid != "":
		b.events = append(b.events, event{worker: rid, name: name, kind: evSeen, capacity: -1})
	}
	return src, rid, name, ok
}

func (m *mapper) logs(ld plog.Logs, b *batch) {
	evAttr := m.cfg.Mapping.EventNameAttribute
	rls := ld.ResourceLogs()
	for i := 0; i < rls.Len(); i++ {
		rl := rls.At(i)
		src, rid, name, ok := m.seen(rl.Resource(), b)
		if !ok {
			continue
		}
		sls := rl.ScopeLogs()
		for j := 0; j < sls.Len(); j++ {
			lrs := sls.At(j).LogRecords()
			for k := 0; k < lrs.Len(); k++ {
				lr := lrs.At(k)
				en := lr.EventName()
				if en == "" && evAttr != "" {
					if v, found := lr.Attributes().Get(evAttr); found && v.Type() == pcommon.ValueTypeStr {
						en = v.Str()
					}
				}
				if en == "" {
					continue
				}
				kd, found := m.kinds[en]
				if !found {
					continue
				}
				e := event{worker: rid, name: name, kind: kd, src: src, ts: int64(lr.Timestamp())}
				if e.ts == 0 {
					e.ts = int64(lr.ObservedTimestamp())
				}
				if !m.fillRun(&e, lr.Attributes()) {
					b.malformed++
					continue
				}
				b.events = append(b.events, e)
			}
		}
	}
}

func (m *mapper) traces(td ptrace.Traces, b *batch) {
	runName := m.cfg.Mapping.RunSpanName
	stages := m.cfg.Mapping.StageSpanNames
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		src, rid, name, ok := m.seen(rs.Resource(), b)
		if !ok {
			continue
		}
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				sn := sp.Name()
				// The hot path: most spans are neither runs nor stages, and a
				// string compare is all they cost.
				if sn == runName && runName != "" {
					e := event{
						worker: rid, name: name, kind: evFinished, src: src,
						ts: int64(sp.EndTimestamp()), startTS: int64(sp.StartTimestamp()),
					}
					if !m.fillRun(&e, sp.Attributes()) {
						b.malformed++
						continue
					}
					b.events = append(b.events, e)
					continue
				}
				for _, st := range stages {
					if sn == st {
						e := event{
							worker: rid, name: name, kind: evStage, src: src, stage: st,
							ts: int64(sp.EndTimestamp()), startTS: int64(sp.StartTimestamp()), capacity: -1,
						}
						if e.worker == "" {
							if id, okID := m.str(sp.Attributes(), m.cfg.Mapping.WorkerIDAttribute); okID && id != "" {
								e.worker = id
							}
						}
						if e.worker != "" {
							b.events = append(b.events, e)
						}
						break
					}
				}
			}
		}
	}
}

func (m *mapper) metrics(md pmetric.Metrics, b *batch) {
	mc := &m.cfg.Metrics
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		src, rid, name, ok := m.resource(rm.Resource())
		if !ok {
			b.malformed++
			continue
		}
		if src == srcScheduler {
			b.schedulerSeen = true
		}
		s := sample{worker: rid, name: name, mem: -1, cgroupMax: -1, cpuMain: -1, present: -1, capacity: -1, active: -1}
		found := false
		sms := rm.ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				mt := ms.At(k)
				switch mt.Name() {
				case mc.Memory:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.mem, found = int64(v), true
					}
				case mc.Present:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.present, found = 0, true
						if v > 0 {
							s.present = 1
						}
					}
				case mc.CPU:
					if v, ok := sumPoints(mt, mc.RoleAttribute, mc.MainRole); ok {
						s.cpuMain, found = v, true
					}
				case mc.CgroupMemoryMax:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.cgroupMax, found = int64(v), true
					}
				case mc.Capacity:
					if v, ok := sumPoints(mt, "", ""); ok && v < 1<<20 {
						s.capacity, found = int(v), true
					}
				case mc.RunsActive:
					if v, ok := sumPoints(mt, "", ""); ok && v >= 0 && v < 1<<20 {
						s.active, found = int(v), true
					}
				case mc.Pending:
					if src == srcScheduler {
						if v, ok := sumPoints(mt, "", ""); ok {
							b.pending = int64(v)
						}
					}
				}
			}
		}
		switch {
		case src == srcScheduler:
		case rid != "" && found:
			b.samples = append(b.samples, s)
		case rid != "":
			b.events = append(b.events, event{worker: rid, name: name, kind: evSeen, capacity: -1})
		}
	}
}

// sumPoints sums a gauge's or sum's latest points (the receiver sends one
// point per role), optionally only those whose attribute key equals value.
// Negative or NaN values are malformed and make the whole metric unusable.
func sumPoints(mt pmetric.Metric, key, value string) (float64, bool) {
	var dps pmetric.NumberDataPointSlice
	switch mt.Type() {
	case pmetric.MetricTypeGauge:
		dps = mt.Gauge().DataPoints()
	case pmetric.MetricTypeSum:
		dps = mt.Sum().DataPoints()
	default:
		return 0, false
	}
	var total float64
	n := 0
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		if key != "" {
			if v, ok := dp.Attributes().Get(key); ok && v.Str() != value {
				continue
			}
		}
		var v float64
		if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
			v = float64(dp.IntValue())
		} else {
			v = dp.DoubleValue()
		}
		if !(v >= 0) { // also rejects NaN
			return 0, false
		}
		total += v
		n++
	}
	return total, n > 0
}
