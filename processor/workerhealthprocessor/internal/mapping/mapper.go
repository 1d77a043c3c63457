package mapping

import (
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Mapper turns pdata into events and samples. It only reads the data (the
// processor never mutates what passes through) and is safe for concurrent
// use: it holds only the compiled configuration.
type Mapper struct {
	cfg        *Settings
	kinds      map[string]Kind
	killResult map[string]bool
	maxLen     int
	// sched maps a scheduler's service.name to its source index in sources.
	sched   map[string]uint8
	sources []Scheduler
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

// idKey is a worker id attribute and its index in Settings.IDKeys.
type idKey struct {
	name string
	idx  uint8
}

// New compiles the mapper of one processor (Validate checked cfg).
func New(cfg *Settings) *Mapper {
	m := &Mapper{
		cfg: cfg, kinds: map[string]Kind{}, killResult: map[string]bool{}, maxLen: cfg.MaxAttributeLength,
		sched: map[string]uint8{}, sources: cfg.Schedulers, childRoles: cfg.ChildRoles,
	}
	ev := cfg.Mapping.Events
	for k, names := range map[Kind][]string{
		KindClaimed: ev.Claimed, KindStarted: ev.Started, KindFinished: ev.Finished,
		KindKilled: ev.Killed, KindReleased: ev.Released, KindHeartbeat: ev.Heartbeat, KindSnapshot: ev.Snapshot,
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
	all := cfg.IDKeys
	keys := func(names []string) []idKey {
		out := make([]idKey, len(names))
		for i, n := range names {
			out[i] = idKey{name: n, idx: uint8(slices.Index(all, n))}
		}
		return out
	}
	m.workerKeys = keys(WithTreeKey(cfg.Mapping.WorkerIDAttributes))
	for i, s := range m.sources {
		m.sched[s.Name] = uint8(i)
		m.schedKeys = append(m.schedKeys, keys(s.Keys))
	}
	return m
}

// str reads a string attribute: "" when absent or malformed (wrong type,
// empty or oversized).
func (m *Mapper) str(attrs pcommon.Map, key string) string {
	v, found := attrs.Get(key)
	if !found {
		return ""
	}
	s, _ := m.strVal(v)
	return s
}

func (m *Mapper) strVal(v pcommon.Value) (string, bool) {
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
func (m *Mapper) idVal(v pcommon.Value) (string, bool) {
	s, ok := m.strVal(v)
	if ok && !utf8.ValidString(s) {
		return "", false
	}
	return s, ok
}

// id reads the worker id: the first of keys present in attrs. ok=false
// means that attribute is malformed; none present is ("", NoKey, true).
func (m *Mapper) id(attrs pcommon.Map, keys []idKey) (id string, key uint8, ok bool) {
	for _, k := range keys {
		if v, found := attrs.Get(k.name); found {
			id, ok = m.idVal(v)
			return id, k.idx, ok
		}
	}
	return "", NoKey, true
}

// keysOf are the id attributes of a source's records.
func (m *Mapper) keysOf(src Side, sched uint8) []idKey {
	if src == SideScheduler {
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

// Ident is what a resource says about whose records it holds.
type Ident struct {
	Src      Side
	Sched    uint8
	ID, Name string
	Key      uint8
	// Inc is the incarnation a worker's resource states.
	Inc IncRef
}

// Resource says whose view a resource is, and its worker id when it
// names one (a worker's resource does; a scheduler's usually does not).
func (m *Mapper) Resource(res pcommon.Resource) (Ident, bool) {
	attrs := res.Attributes()
	var r Ident
	if len(m.sched) > 0 {
		if sn, found := attrs.Get(contract.AttrServiceName); found && sn.Type() == pcommon.ValueTypeStr {
			if i, ok := m.sched[sn.Str()]; ok {
				r.Src, r.Sched = SideScheduler, i
			}
		}
	}
	id, key, ok := m.id(attrs, m.keysOf(r.Src, r.Sched))
	if !ok {
		return r, false
	}
	r.ID, r.Key = id, key
	r.Name = m.str(attrs, m.cfg.Mapping.WorkerNameAttribute)
	if r.Src == SideWorker {
		r.Inc = m.incarnation(attrs)
	}
	return r, true
}

// incarnation reads what a worker's resource says of its incarnation
// (contract: process.pid, process.creation.time, service.instance.id, and a
// root's exit). Malformed values are left out.
func (m *Mapper) incarnation(attrs pcommon.Map) IncRef {
	var ref IncRef
	if v, ok := attrs.Get(contract.AttrPID); ok && v.Type() == pcommon.ValueTypeInt && v.Int() > 0 && v.Int() < 1<<32 {
		ref.PID = v.Int()
	}
	ref.Started = m.timeAttr(attrs, contract.AttrProcessCreationTime)
	ref.ServiceInstance = m.str(attrs, contract.AttrServiceInstanceID)
	if ref.ExitAt = m.timeAttr(attrs, contract.AttrProcessExitTime); ref.ExitAt > 0 {
		ref.ExitCode = -1
		if v, ok := attrs.Get(contract.AttrProcessExitCode); ok && v.Type() == pcommon.ValueTypeInt && v.Int() >= 0 && v.Int() < 256 {
			ref.ExitCode = v.Int()
		}
		if v, ok := attrs.Get(contract.AttrProcessExitSignal); ok && v.Type() == pcommon.ValueTypeInt && v.Int() > 0 && v.Int() < 128 {
			ref.ExitSignal = v.Int()
		}
	}
	return ref
}

// timeAttr reads an ISO 8601 (RFC 3339) time attribute as unix ns; 0 when
// absent or malformed.
func (m *Mapper) timeAttr(attrs pcommon.Map, key string) int64 {
	s := m.str(attrs, key)
	if s == "" {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Unix() <= 0 {
		return 0
	}
	return t.UnixNano()
}

// fillRun reads the run attributes shared by log records and spans. It
// returns false when the record is malformed.
func (m *Mapper) fillRun(e *Event, attrs pcommon.Map) bool {
	mp := m.cfg.Mapping
	var ok bool
	if e.Src == SideScheduler || e.Worker == "" {
		// The scheduler names the worker on each record; a worker may too.
		if id, key, okID := m.id(attrs, m.keysOf(e.Src, e.Sched)); !okID {
			return false
		} else if id != "" {
			e.Worker, e.Key = id, key
		}
	}
	if e.Worker == "" {
		return false
	}
	e.Capacity = intAttr(attrs, mp.CapacityAttribute)
	switch e.Kind {
	case KindHeartbeat:
		return true
	case KindSnapshot:
		return m.snapshotRuns(e, attrs)
	}
	runID, found := attrs.Get(mp.RunIDAttribute)
	if !found {
		return false
	}
	if e.Run, ok = m.idVal(runID); !ok {
		return false
	}
	if n := intAttr(attrs, contract.AttrRunAttempt); n > 0 {
		e.Attempt = n
	}
	if e.Kind != KindFinished && e.Kind != KindKilled {
		return true
	}
	raw := m.str(attrs, mp.ResultAttribute)
	errType := m.str(attrs, mp.ErrorTypeAttribute)
	reason := m.str(attrs, mp.KillReasonAttribute)
	if m.killResult[raw] {
		e.Kind = KindKilled
	}
	if reason == "" && len(m.killPatterns) > 0 {
		if text := m.str(attrs, mp.FailureReasonAttribute); text != "" {
			for _, kp := range m.killPatterns {
				if kp.re.MatchString(text) {
					e.Kind, reason = KindKilled, kp.reason
					break
				}
			}
		}
	}
	if e.Kind == KindKilled && reason == "" {
		reason = mp.ErrorTypeKillReasons[errType]
	}
	e.KillReason = reason
	if r, found := mp.ResultValues[raw]; found {
		raw = r
	}
	e.Result = raw
	return true
}

// snapshotRuns reads a snapshot's run ids: a string array (a string is one
// id). A snapshot without the attribute is malformed: it cannot say "none".
func (m *Mapper) snapshotRuns(e *Event, attrs pcommon.Map) bool {
	if e.Src != SideScheduler {
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
		e.SnapRuns = []string{id}
	case pcommon.ValueTypeSlice:
		sl := v.Slice()
		e.SnapRuns = make([]string, 0, sl.Len())
		for i := 0; i < sl.Len(); i++ {
			id, ok := m.idVal(sl.At(i))
			if !ok {
				return false
			}
			e.SnapRuns = append(e.SnapRuns, id)
		}
	default:
		return false
	}
	return true
}

// seen reads a resource's identity for the logs and traces paths: a resource
// without a usable identity is malformed; a scheduler's marks the batch as
// carrying the scheduler's view; a worker's counts as a sign of life.
func (m *Mapper) seen(res pcommon.Resource, b *Batch) (Ident, bool) {
	r, ok := m.Resource(res)
	switch {
	case !ok:
		b.Malformed++
	case r.Src == SideScheduler:
		b.SchedulerSeen = true
	case r.ID != "":
		b.Events = append(b.Events, Event{Worker: r.ID, Name: r.Name, Kind: KindSeen, Capacity: -1, Key: r.Key, Inc: r.Inc})
	}
	return r, ok
}

// Logs appends the lifecycle events of ld's records to b.
func (m *Mapper) Logs(ld plog.Logs, b *Batch) {
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
				if !found || (kd == KindSnapshot && r.Src != SideScheduler) {
					continue
				}
				e := Event{Worker: r.ID, Name: r.Name, Kind: kd, Src: r.Src, Sched: r.Sched, Key: r.Key, TS: int64(lr.Timestamp())}
				if e.TS == 0 {
					e.TS = int64(lr.ObservedTimestamp())
				}
				if !m.fillRun(&e, lr.Attributes()) {
					b.Malformed++
					continue
				}
				b.Events = append(b.Events, e)
			}
		}
	}
}

// Traces appends the events of td's run and stage spans to b.
func (m *Mapper) Traces(td ptrace.Traces, b *Batch) {
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
					e := Event{
						Worker: r.ID, Name: r.Name, Kind: KindFinished, Src: r.Src, Sched: r.Sched, Key: r.Key,
						TS: int64(sp.EndTimestamp()), StartTS: int64(sp.StartTimestamp()),
					}
					if !m.fillRun(&e, sp.Attributes()) {
						b.Malformed++
						continue
					}
					b.Events = append(b.Events, e)
					continue
				}
				for _, st := range stages {
					if sn == st {
						e := Event{
							Worker: r.ID, Name: r.Name, Kind: KindStage, Src: r.Src, Sched: r.Sched, Key: r.Key, Stage: st,
							TS: int64(sp.EndTimestamp()), StartTS: int64(sp.StartTimestamp()), Capacity: -1,
						}
						if e.Worker == "" {
							if id, key, okID := m.id(sp.Attributes(), m.keysOf(r.Src, r.Sched)); okID && id != "" {
								e.Worker, e.Key = id, key
							}
						}
						if e.Worker != "" {
							b.Events = append(b.Events, e)
						}
						break
					}
				}
			}
		}
	}
}

// runPrefix: the span name starts with one of mapping.run_span_name_prefixes.
func (m *Mapper) runPrefix(name string) bool {
	for _, p := range m.cfg.Mapping.RunSpanNamePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
