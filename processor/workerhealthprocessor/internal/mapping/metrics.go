package mapping

import (
	"math"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Metrics appends md's worker samples and scheduler counts to b.
func (m *Mapper) Metrics(md pmetric.Metrics, b *Batch) {
	mc := m.cfg.Metrics
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		r, ok := m.Resource(rm.Resource())
		if !ok {
			b.Malformed++
			continue
		}
		if r.Src == SideScheduler {
			b.SchedulerSeen = true
			m.schedulerMetrics(rm, r.Sched, b)
			continue
		}
		s := NewSample(r.ID, r.Name, r.Key)
		s.Inc = r.Inc
		found := false
		sms := rm.ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				mt := ms.At(k)
				switch mt.Name() {
				case mc.Memory:
					if v, ok := m.memoryPoints(mt, &s); ok {
						s.Mem, found = saturate(v), true
					}
				case mc.Present:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.Present, s.Tree, found = 0, true, true
						if v > 0 {
							s.Present = 1
						}
					}
				case mc.CPU:
					if v, ok := sumPoints(mt, mc.RoleAttribute, mc.MainRole); ok {
						s.CPUMain, found = v, true
					}
				case mc.CPULimit:
					if v, ok := sumPoints(mt, "", ""); ok && v > 0 {
						s.CPULimit, found = v, true
					}
				case mc.CgroupMemoryMax:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.CgroupMax, found = saturate(v), true
					}
				case mc.OOMKills:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.OOMKills, found = saturate(v), true
					}
				case mc.Exited:
					if main, child, ok := m.exitPoints(mt); ok {
						s.ExitMain, s.ExitChild, found = main, child, true
					}
				case mc.Capacity:
					if v, ok := sumPoints(mt, "", ""); ok && v < 1<<20 {
						s.Capacity, found = int(v), true
					}
				case mc.RunsActive:
					if v, ok := sumPoints(mt, "", ""); ok && v >= 0 && v < 1<<20 {
						s.Active, found = int(v), true
					}
				}
			}
		}
		switch {
		case r.ID != "" && found:
			b.Samples = append(b.Samples, s)
		case r.ID != "":
			b.Events = append(b.Events, Event{Worker: r.ID, Name: r.Name, Kind: KindSeen, Capacity: -1, Key: r.Key, Inc: r.Inc})
		}
	}
}

// schedulerMetrics reads a scheduler's pending gauge and, from a "snapshots"
// scheduler, its count of the runs it holds per worker.
func (m *Mapper) schedulerMetrics(rm pmetric.ResourceMetrics, sched uint8, b *Batch) {
	mc := m.cfg.Metrics
	counts := m.sources[sched].View == contract.ViewSnapshots && mc.SchedulerHeld != ""
	sms := rm.ScopeMetrics()
	for j := 0; j < sms.Len(); j++ {
		ms := sms.At(j).Metrics()
		for k := 0; k < ms.Len(); k++ {
			mt := ms.At(k)
			switch {
			case mt.Name() == mc.Pending:
				if v, ok := sumPointsIn(mt, mc.PendingAttribute, mc.PendingValues); ok {
					b.Pending = saturate(v)
				}
			case counts && mt.Name() == mc.SchedulerHeld:
				m.heldCounts(mt, sched, b)
			}
		}
	}
}

// heldCounts turns each point of the scheduler's held gauge (one per
// worker, the worker named on the point) into a KindHeldCount.
func (m *Mapper) heldCounts(mt pmetric.Metric, sched uint8, b *Batch) {
	var dps pmetric.NumberDataPointSlice
	switch mt.Type() {
	case pmetric.MetricTypeGauge:
		dps = mt.Gauge().DataPoints()
	case pmetric.MetricTypeSum:
		dps = mt.Sum().DataPoints()
	default:
		b.Malformed++
		return
	}
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		id, key, ok := m.id(dp.Attributes(), m.schedKeys[sched])
		v := pointValue(dp)
		if !ok || id == "" || !(v >= 0) || v >= 1<<20 {
			b.Malformed++
			continue
		}
		b.Events = append(b.Events, Event{Worker: id, Kind: KindHeldCount, Src: SideScheduler, Sched: sched, Key: key, Held: int(v), Capacity: -1})
	}
}

// memoryPoints sums the memory gauge over its roles (the tree) and keeps
// each role's value in the sample.
func (m *Mapper) memoryPoints(mt pmetric.Metric, s *Sample) (float64, bool) {
	dps, ok := numberPoints(mt)
	if !ok {
		return 0, false
	}
	roleKey := m.cfg.Metrics.RoleAttribute
	var total float64
	s.NRole = 0
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		v := pointValue(dp)
		if !(v >= 0) { // also rejects NaN
			s.NRole = 0
			return 0, false
		}
		total += v
		if rv, found := dp.Attributes().Get(roleKey); found && rv.Type() == pcommon.ValueTypeStr && s.NRole < MaxSampleRoles {
			if role := rv.Str(); role != "" && len(role) <= m.maxLen {
				s.Roles[s.NRole] = RoleVal{Role: role, RSS: saturate(v)}
				s.NRole++
			}
		}
	}
	return total, dps.Len() > 0
}

// exitPoints sums the exited counter of the main role and of the child roles.
func (m *Mapper) exitPoints(mt pmetric.Metric) (main, child int64, ok bool) {
	dps, ok := numberPoints(mt)
	if !ok || dps.Len() == 0 {
		return 0, 0, false
	}
	mc := m.cfg.Metrics
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		v := pointValue(dp)
		if !(v >= 0) {
			return 0, 0, false
		}
		role := ""
		if rv, found := dp.Attributes().Get(mc.RoleAttribute); found {
			role = rv.Str()
		}
		switch {
		case role == mc.MainRole:
			main += saturate(v)
		case m.childRoles == nil || slices.Contains(m.childRoles, role):
			child += saturate(v)
		}
	}
	return main, child, true
}

// sumPointsIn sums the points whose attribute key has one of values (every
// point when key is empty); false when none or a value is malformed.
func sumPointsIn(mt pmetric.Metric, key string, values []string) (float64, bool) {
	if key == "" {
		return sumPoints(mt, "", "")
	}
	return sumWhere(mt, key, func(v string, found bool) bool { return found && slices.Contains(values, v) })
}

func numberPoints(mt pmetric.Metric) (pmetric.NumberDataPointSlice, bool) {
	switch mt.Type() {
	case pmetric.MetricTypeGauge:
		return mt.Gauge().DataPoints(), true
	case pmetric.MetricTypeSum:
		return mt.Sum().DataPoints(), true
	}
	return pmetric.NumberDataPointSlice{}, false
}

// saturate converts a non-negative sample to int64, the largest int64 for
// what does not fit: a float beyond 2^63 converts to an undefined value in Go
// (a negative one on amd64), which read a 1e300-byte sample as "no sample"
// and left an absurd worker healthy (issue 14.7).
func saturate(v float64) int64 {
	if v >= 0x1p63 {
		return math.MaxInt64
	}
	return int64(v)
}

func pointValue(dp pmetric.NumberDataPoint) float64 {
	if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
		return float64(dp.IntValue())
	}
	return dp.DoubleValue()
}

// sumPoints sums a gauge's or sum's latest points (the receiver sends one
// point per role), optionally only those whose attribute key equals value.
// Negative or NaN values are malformed and make the whole metric unusable.
func sumPoints(mt pmetric.Metric, key, value string) (float64, bool) {
	if key == "" {
		return sumWhere(mt, "", nil)
	}
	return sumWhere(mt, key, func(v string, found bool) bool { return !found || v == value })
}

// sumWhere sums the points keep takes (by their attribute key's value and
// whether they have it; every point when keep is nil). Negative or NaN
// values are malformed and make the whole metric unusable.
func sumWhere(mt pmetric.Metric, key string, keep func(v string, found bool) bool) (float64, bool) {
	dps, ok := numberPoints(mt)
	if !ok {
		return 0, false
	}
	var total float64
	n := 0
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		if keep != nil {
			s := ""
			v, found := dp.Attributes().Get(key)
			if found {
				s = v.Str()
			}
			if !keep(s, found) {
				continue
			}
		}
		v := pointValue(dp)
		if !(v >= 0) { // also rejects NaN
			return 0, false
		}
		total += v
		n++
	}
	return total, n > 0
}
