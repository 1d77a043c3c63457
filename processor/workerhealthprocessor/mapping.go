package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

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
	killResult map[string]bool
	maxLen     int
	// sched maps a scheduler's service.name to its source index in sources.
	sched   map[string]uint8
	sources []schedSource
	// workerKeys and schedKeys are the id attributes tried, in order, on the
	// workers' records and on each scheduler's.
	workerKeys []idKey
	schedKeys  [][]idKey
	// childRoles: the roles whose exits count as child exits (nil = every
	// role but the main one).
	childRoles []string
	// killPatterns: mapping.kill_reason_patterns, compiled.
	killPatterns []killPattern
}

type killPattern struct {
	re     *regexp.Regexp
	reason string
}

// idKey is a worker id attribute and its index in Config.idKeys.
type idKey struct {
	name string
	idx  uint8
}

func newMapper(cfg *Config) *mapper {
	m := &mapper{
		cfg: cfg, kinds: map[string]kind{}, killResult: map[string]bool{}, maxLen: cfg.Limits.MaxAttributeLength,
		sched: map[string]uint8{}, sources: cfg.schedulers(), childRoles: cfg.Kills.ChildRoles,
	}
	ev := cfg.Mapping.Events
	for k, names := range map[kind][]string{
		evClaimed: ev.Claimed, evStarted: ev.Started, evFinished: ev.Finished,
		evKilled: ev.Killed, evReleased: ev.Released, evHeartbeat: ev.Heartbeat, evSnapshot: ev.Snapshot,
	} {
		for _, n := range names {
			m.kinds[n] = k
		}
	}
	for _, r := range cfg.Mapping.KillResults {
		m.killResult[r] = true
	}
	for _, kp := range cfg.Mapping.KillReasonPatterns {
		// Validate compiled every pattern already.
		m.killPatterns = append(m.killPatterns, killPattern{re: regexp.MustCompile(kp.Pattern), reason: kp.Reason})
	}
	all := cfg.idKeys()
	keys := func(names []string) []idKey {
		out := make([]idKey, len(names))
		for i, n := range names {
			out[i] = idKey{name: n, idx: uint8(slices.Index(all, n))}
		}
		return out
	}
	m.workerKeys = keys(withTreeKey(cfg.Mapping.WorkerIDAttributes))
	for i, s := range m.sources {
		m.sched[s.name] = uint8(i)
		m.schedKeys = append(m.schedKeys, keys(s.keys))
	}
	return m
}

// str reads a string attribute: "" when absent or malformed (wrong type,
// empty or oversized).
func (m *mapper) str(attrs pcommon.Map, key string) string {
	v, found := attrs.Get(key)
	if !found {
		return ""
	}
	s, _ := m.strVal(v)
	return s
}

func (m *mapper) strVal(v pcommon.Value) (string, bool) {
	if v.Type() != pcommon.ValueTypeStr {
		return "", false
	}
	s := v.Str()
	if s == "" || len(s) > m.maxLen {
		return "", false
	}
	return s, true
}

// idVal reads a worker or run id: a string value that is also valid UTF-8.
// Invalid UTF-8 is refused: JSON, the health API and most backends turn
// every invalid byte into U+FFFD, so "dup\xff" and "dup\xfe" would be two
// workers with one visible id (issue 14.5). Other values (results, reasons)
// are only compared with known names, so they need no check.
func (m *mapper) idVal(v pcommon.Value) (string, bool) {
	s, ok := m.strVal(v)
	if ok && !utf8.ValidString(s) {
		return "", false
	}
	return s, ok
}

// id reads the worker id: the first of keys present in attrs. ok=false
// means that attribute is malformed; none present is ("", noKey, true).
func (m *mapper) id(attrs pcommon.Map, keys []idKey) (id string, key uint8, ok bool) {
	for _, k := range keys {
		if v, found := attrs.Get(k.name); found {
			id, ok = m.idVal(v)
			return id, k.idx, ok
		}
	}
	return "", noKey, true
}

// keysOf are the id attributes of a source's records.
func (m *mapper) keysOf(src source, sched uint8) []idKey {
	if src == srcScheduler {
		return m.schedKeys[sched]
	}
	return m.workerKeys
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

// ident is what a resource says about whose records it holds.
type ident struct {
	src      source
	sched    uint8
	id, name string
	key      uint8
}

// resource says whose view a resource is, and its worker id when it
// names one (a worker's resource does; a scheduler's usually does not).
func (m *mapper) resource(res pcommon.Resource) (ident, bool) {
	attrs := res.Attributes()
	var r ident
	if len(m.sched) > 0 {
		if sn, found := attrs.Get(contract.AttrServiceName); found && sn.Type() == pcommon.ValueTypeStr {
			if i, ok := m.sched[sn.Str()]; ok {
				r.src, r.sched = srcScheduler, i
			}
		}
	}
	id, key, ok := m.id(attrs, m.keysOf(r.src, r.sched))
	if !ok {
		return r, false
	}
	r.id, r.key = id, key
	r.name = m.str(attrs, m.cfg.Mapping.WorkerNameAttribute)
	return r, true
}

// fillRun reads the run attributes shared by log records and spans. It
// returns false when the record is malformed.
func (m *mapper) fillRun(e *event, attrs pcommon.Map) bool {
	mp := &m.cfg.Mapping
	var ok bool
	if e.src == srcScheduler || e.worker == "" {
		// The scheduler names the worker on each record; a worker may too.
		if id, key, okID := m.id(attrs, m.keysOf(e.src, e.sched)); !okID {
			return false
		} else if id != "" {
			e.worker, e.key = id, key
		}
	}
	if e.worker == "" {
		return false
	}
	e.capacity = intAttr(attrs, mp.CapacityAttribute)
	switch e.kind {
	case evHeartbeat:
		return true
	case evSnapshot:
		return m.snapshotRuns(e, attrs)
	}
	runID, found := attrs.Get(mp.RunIDAttribute)
	if !found {
		return false
	}
	if e.run, ok = m.idVal(runID); !ok {
		return false
	}
	if e.kind != evFinished && e.kind != evKilled {
		return true
	}
	raw := m.str(attrs, mp.ResultAttribute)
	errType := m.str(attrs, mp.ErrorTypeAttribute)
	reason := m.str(attrs, mp.KillReasonAttribute)
	if m.killResult[raw] {
		e.kind = evKilled
	}
	if reason == "" && len(m.killPatterns) > 0 {
		if text := m.str(attrs, mp.FailureReasonAttribute); text != "" {
			for _, kp := range m.killPatterns {
				if kp.re.MatchString(text) {
					e.kind, reason = evKilled, kp.reason
					break
				}
			}
		}
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

// snapshotRuns reads a snapshot's run ids: a string array (a string is one
// id). A snapshot without the attribute is malformed: it cannot say "none".
func (m *mapper) snapshotRuns(e *event, attrs pcommon.Map) bool {
	if e.src != srcScheduler {
		return false
	}
	v, found := attrs.Get(m.cfg.Mapping.SnapshotRunsAttribute)
	if !found {
		return false
	}
	switch v.Type() {
	case pcommon.ValueTypeStr:
		id, ok := m.idVal(v)
		if !ok {
			return false
		}
		e.snapRuns = []string{id}
	case pcommon.ValueTypeSlice:
		sl := v.Slice()
		e.snapRuns = make([]string, 0, sl.Len())
		for i := 0; i < sl.Len(); i++ {
			id, ok := m.idVal(sl.At(i))
			if !ok {
				return false
			}
			e.snapRuns = append(e.snapRuns, id)
		}
	default:
		return false
	}
	return true
}

// seen reads a resource's identity for the logs and traces paths: a resource
// without a usable identity is malformed; a scheduler's marks the batch as
// carrying the scheduler's view; a worker's counts as a sign of life.
func (m *mapper) seen(res pcommon.Resource, b *batch) (ident, bool) {
	r, ok := m.resource(res)
	switch {
	case !ok:
		b.malformed++
	case r.src == srcScheduler:
		b.schedulerSeen = true
	case r.id != "":
		b.events = append(b.events, event{worker: r.id, name: r.name, kind: evSeen, capacity: -1, key: r.key})
	}
	return r, ok
}

func (m *mapper) logs(ld plog.Logs, b *batch) {
	evAttr := m.cfg.Mapping.EventNameAttribute
	rls := ld.ResourceLogs()
	for i := 0; i < rls.Len(); i++ {
		rl := rls.At(i)
		r, ok := m.seen(rl.Resource(), b)
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
				if !found || (kd == evSnapshot && r.src != srcScheduler) {
					continue
				}
				e := event{worker: r.id, name: r.name, kind: kd, src: r.src, sched: r.sched, key: r.key, ts: int64(lr.Timestamp())}
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
		r, ok := m.seen(rs.Resource(), b)
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
				if (sn == runName && runName != "") || m.runPrefix(sn) {
					e := event{
						worker: r.id, name: r.name, kind: evFinished, src: r.src, sched: r.sched, key: r.key,
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
							worker: r.id, name: r.name, kind: evStage, src: r.src, sched: r.sched, key: r.key, stage: st,
							ts: int64(sp.EndTimestamp()), startTS: int64(sp.StartTimestamp()), capacity: -1,
						}
						if e.worker == "" {
							if id, key, okID := m.id(sp.Attributes(), m.keysOf(r.src, r.sched)); okID && id != "" {
								e.worker, e.key = id, key
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
		r, ok := m.resource(rm.Resource())
		if !ok {
			b.malformed++
			continue
		}
		if r.src == srcScheduler {
			b.schedulerSeen = true
			m.schedulerMetrics(rm, r.sched, b)
			continue
		}
		s := newSample(r.id, r.name, r.key)
		found := false
		sms := rm.ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				mt := ms.At(k)
				switch mt.Name() {
				case mc.Memory:
					if v, ok := m.memoryPoints(mt, &s); ok {
						s.mem, found = saturate(v), true
					}
				case mc.Present:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.present, s.tree, found = 0, true, true
						if v > 0 {
							s.present = 1
						}
					}
				case mc.CPU:
					if v, ok := sumPoints(mt, mc.RoleAttribute, mc.MainRole); ok {
						s.cpuMain, found = v, true
					}
				case mc.CPULimit:
					if v, ok := sumPoints(mt, "", ""); ok && v > 0 {
						s.cpuLimit, found = v, true
					}
				case mc.CgroupMemoryMax:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.cgroupMax, found = saturate(v), true
					}
				case mc.OOMKills:
					if v, ok := sumPoints(mt, "", ""); ok {
						s.oomKills, found = saturate(v), true
					}
				case mc.Exited:
					if main, child, ok := m.exitPoints(mt); ok {
						s.exitMain, s.exitChild, found = main, child, true
					}
				case mc.Capacity:
					if v, ok := sumPoints(mt, "", ""); ok && v < 1<<20 {
						s.capacity, found = int(v), true
					}
				case mc.RunsActive:
					if v, ok := sumPoints(mt, "", ""); ok && v >= 0 && v < 1<<20 {
						s.active, found = int(v), true
					}
				}
			}
		}
		switch {
		case r.id != "" && found:
			b.samples = append(b.samples, s)
		case r.id != "":
			b.events = append(b.events, event{worker: r.id, name: r.name, kind: evSeen, capacity: -1, key: r.key})
		}
	}
}

// schedulerMetrics reads a scheduler's pending gauge and, from a "snapshots"
// scheduler, its count of the runs it holds per worker.
func (m *mapper) schedulerMetrics(rm pmetric.ResourceMetrics, sched uint8, b *batch) {
	mc := &m.cfg.Metrics
	counts := m.sources[sched].view == contract.ViewSnapshots && mc.SchedulerHeld != ""
	sms := rm.ScopeMetrics()
	for j := 0; j < sms.Len(); j++ {
		ms := sms.At(j).Metrics()
		for k := 0; k < ms.Len(); k++ {
			mt := ms.At(k)
			switch {
			case mt.Name() == mc.Pending:
				if v, ok := sumPointsIn(mt, mc.PendingAttribute, mc.PendingValues); ok {
					b.pending = saturate(v)
				}
			case counts && mt.Name() == mc.SchedulerHeld:
				m.heldCounts(mt, sched, b)
			}
		}
	}
}

// heldCounts turns each point of the scheduler's held gauge (one per
// worker, the worker named on the point) into an evHeldCount.
func (m *mapper) heldCounts(mt pmetric.Metric, sched uint8, b *batch) {
	var dps pmetric.NumberDataPointSlice
	switch mt.Type() {
	case pmetric.MetricTypeGauge:
		dps = mt.Gauge().DataPoints()
	case pmetric.MetricTypeSum:
		dps = mt.Sum().DataPoints()
	default:
		b.malformed++
		return
	}
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		id, key, ok := m.id(dp.Attributes(), m.schedKeys[sched])
		v := pointValue(dp)
		if !ok || id == "" || !(v >= 0) || v >= 1<<20 {
			b.malformed++
			continue
		}
		b.events = append(b.events, event{worker: id, kind: evHeldCount, src: srcScheduler, sched: sched, key: key, held: int(v), capacity: -1})
	}
}

// memoryPoints sums the memory gauge over its roles (the tree) and keeps
// each role's value in the sample.
func (m *mapper) memoryPoints(mt pmetric.Metric, s *sample) (float64, bool) {
	dps, ok := numberPoints(mt)
	if !ok {
		return 0, false
	}
	roleKey := m.cfg.Metrics.RoleAttribute
	var total float64
	s.nrole = 0
	for i := 0; i < dps.Len(); i++ {
		dp := dps.At(i)
		v := pointValue(dp)
		if !(v >= 0) { // also rejects NaN
			s.nrole = 0
			return 0, false
		}
		total += v
		if rv, found := dp.Attributes().Get(roleKey); found && rv.Type() == pcommon.ValueTypeStr && s.nrole < maxSampleRoles {
			if role := rv.Str(); role != "" && len(role) <= m.maxLen {
				s.roles[s.nrole] = roleVal{role: role, rss: saturate(v)}
				s.nrole++
			}
		}
	}
	return total, dps.Len() > 0
}

// exitPoints sums the exited counter of the main role and of the child roles.
func (m *mapper) exitPoints(mt pmetric.Metric) (main, child int64, ok bool) {
	dps, ok := numberPoints(mt)
	if !ok || dps.Len() == 0 {
		return 0, 0, false
	}
	mc := &m.cfg.Metrics
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

// runPrefix: the span name starts with one of mapping.run_span_name_prefixes.
func (m *mapper) runPrefix(name string) bool {
	for _, p := range m.cfg.Mapping.RunSpanNamePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
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
