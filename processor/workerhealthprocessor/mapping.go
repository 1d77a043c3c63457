package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
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

// runPrefix: the span name starts with one of mapping.run_span_name_prefixes.
func (m *mapper) runPrefix(name string) bool {
	for _, p := range m.cfg.Mapping.RunSpanNamePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
