package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// scopeName is the scope of everything the processor emits. The names are in
// internal/contract. The metrics are built by hand rather than with
// mdatagen's MetricsBuilder: a state-set gauge has one point per state per
// worker, and the histograms are cumulative with configurable bounds, neither
// of which the generated builder expresses.
const scopeName = "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

// stateZerosFor is how long after a worker entered its state the other
// states' 0 points are still sent: long enough for an exporter behind by
// many evaluations (a superseded emission, docs/scaling.md) to take one of
// them and replace the 1 of the state left; after it only the current
// state's 1 is sent, and the exporter drops the other series at its
// metric_expiration (their last value 0).
const stateZerosFor = 5 * time.Minute

// buildMetrics renders the tracker: one resource per worker, identified by
// cicd.worker.id as the worker_process receiver identifies its tree, with
// the worker's series; then one resource without attributes for the
// fleet-wide figures (workers by state, idle capacity, pending runs, the
// histograms), which belong to no worker. The worker's name is not on the
// resource: a name that appears or changes later would start new series
// (with a Prometheus exporter, a second series per state until the old one
// expires); the state-change records and the health API carry it. Workers
// seen once are left out, of the fleet figures too (internal/tracker/admission.go).
// A worker's drift gauges are sent while it has drift and for stateZerosFor
// after (state.Drift.DriftAt): its 0s replace what an exporter held, then
// they expire there (docs/telemetry.md).
//
// Called under the processor's lock. The processor itself does not call it:
// an evaluation keeps rows (collectRows) and the emitter renders them a
// piece at a time (renderRows); buildMetrics is both at once, every worker,
// for tests.
func buildMetrics(t *tracker.Tracker, start, now int64) pmetric.Metrics {
	rows, fleet := collectRows(t, start, now, nil)
	md := pmetric.NewMetrics()
	renderRows(md, rows, start, now)
	fleet.ResourceMetrics().MoveAndAppendTo(md.ResourceMetrics())
	return md
}

// workerRow is one worker's series as an evaluation found them, copied under
// the processor's lock. An emission holds rows, about 130 bytes a worker, and
// the emitter renders them into pdata a piece at a time as it sends them
// (renderRows): as pdata an emission of a fleet just judged is about 2.5 KiB a
// worker (BenchmarkEmissionHeld), and a shard held two (the one being sent,
// and the next evaluation's waiting for it), 0.5 GB of a remote-write
// shard's 1 GiB in the heap profiles of docs/results/scaling.md, "run 9".
type workerRow struct {
	id    string
	stale bool // its series end: staleRow
	// left are the groups of series left out, unchanged since they were
	// last delivered (resend_interval); 0: all of them.
	left seriesGroups
	seriesValues
}

// seriesGroups are sets of a worker's series that an evaluation sends or
// leaves out together, each with its own sum (tracker.SeriesSums): what
// moves with every run (claims), what moves when a worker takes or ends
// its work (runs held) and the verdict (the state set, transitions, drift
// and kills). A worker running a run every 10 s changes its claims at every
// evaluation and the rest seldom: sent whole, it was 11 points an
// evaluation for the 2 that changed, 1.05 million points every 10 s at
// 100,000 workers, and the remote-write conversion of them took the shard's
// CPU from the health API for 4 s of every 10 (docs/results/scaling.md,
// run 39). The unchanged groups are sent again with the rest at the
// worker's resend_interval point.
type seriesGroups uint8

const (
	groupVerdict seriesGroups = 1 << iota
	groupHeld
	groupClaims
	allGroups = groupVerdict | groupHeld | groupClaims
)

// sums are the values' sums by group, in the order of the groups' bits.
func (v *seriesValues) sums() tracker.SeriesSums {
	return tracker.SeriesSums{
		uint32(maphash.Comparable(sumSeed, v.verdictValues)),
		uint32(maphash.Comparable(sumSeed, v.held)),
		uint32(maphash.Comparable(sumSeed, v.claims)),
	}
}

// collectRows copies the workers' series values and renders the fleet-wide
// resource. Under the processor's lock.
//
// With rs, the groups of a worker's series (seriesGroups) that have not
// changed since they were last delivered are left out until the worker's
// resend point (resend_interval), the worker too when none changed (it
// still counts in the fleet figures), and the workers sent are listed in
// rs.sent for the processor to mark once delivered. rs nil: every worker,
// whole.
func collectRows(t *tracker.Tracker, start, now int64, rs *resend) ([]workerRow, pmetric.Metrics) {
	ws := t.ByID()
	// Sized up front: every worker without resend_interval, else as many as
	// the evaluation before sent (rs.hint); grown past it by append. An
	// emission of 100,000 rows grown from nothing allocates twice its size
	// and holds up to twice what it needs.
	size := len(ws)
	if rs != nil {
		size = min(size, rs.hint+rs.hint/8)
		rs.sent = make([]sentMark, 0, size)
	}
	rows := make([]workerRow, 0, size)
	byState := make([]int64, len(contract.AllStates)) // for the fleet gauge
	for _, w := range ws {
		if w.Evidence == state.EvidenceOnce {
			// Not exported until seen again (internal/tracker/admission.go): a flood of ids
			// must not become a flood of series downstream.
			continue
		}
		byState[w.StateIndex()]++
		v := currentValues(w, now)
		var left seriesGroups
		if rs != nil {
			sums := v.sums()
			last, at := w.Sent()
			if !rs.due(now, at, w.ID()) {
				for g := range sums {
					if sums[g] == last[g] {
						left |= 1 << g
					}
				}
				if left == allGroups {
					continue
				}
			}
			rs.sent = append(rs.sent, sentMark{w: w, sums: sums, all: left == 0})
		}
		rows = append(rows, workerRow{id: w.ID(), left: left, seriesValues: v})
	}
	return rows, buildFleet(t, start, now, byState)
}

// currentValues are the values of the series an evaluation at now sends for
// w. The 0s of the other states only while the worker's state is recent
// (stateZerosFor): an exporter then holds 0 for the state it left until the
// series expires, and a steady worker is one series, not six (issue 24;
// docs/telemetry.md).
func currentValues(w *tracker.Worker, now int64) seriesValues {
	zeros := now-w.Since < int64(stateZerosFor)
	drifted := w.DriftAt > 0 && now-w.DriftAt < int64(stateZerosFor)
	return valuesOf(w, w.StateIndex(), zeros, drifted)
}

// staleRow is the row that ends w's series downstream, for a worker this
// processor stops exporting (handed over to another shard, or the
// collector shutting down): the series an evaluation would send for it now,
// every point flagged as having no recorded value. A Prometheus exporter
// drops such a series at once; remote write sends Prometheus's staleness
// marker, which ends it at once instead of after the lookback (5 minutes).
// ok is false for a worker never exported (seen once: collectRows).
func staleRow(w *tracker.Worker, now int64) (workerRow, bool) {
	if w.Evidence == state.EvidenceOnce {
		return workerRow{}, false
	}
	return workerRow{id: w.ID(), stale: true, seriesValues: currentValues(w, now)}, true
}

// markNoRecordedValue flags every point of md as having no recorded value
// (the fleet's figures when the processor stops: endSeries; a worker's rows
// are flagged as they are rendered, metricHelpers.stale).
func markNoRecordedValue(md pmetric.Metrics) {
	noValue := pmetric.DefaultDataPointFlags.WithNoRecordedValue(true)
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				switch m := ms.At(k); m.Type() {
				case pmetric.MetricTypeGauge:
					for _, dp := range m.Gauge().DataPoints().All() {
						dp.SetFlags(noValue)
					}
				case pmetric.MetricTypeSum:
					for _, dp := range m.Sum().DataPoints().All() {
						dp.SetFlags(noValue)
					}
				case pmetric.MetricTypeHistogram:
					for _, dp := range m.Histogram().DataPoints().All() {
						dp.SetFlags(noValue)
					}
				}
			}
		}
	}
}

// valuesOf copies the values of a worker's series.
func valuesOf(w *tracker.Worker, cur int, zeros, drifted bool) seriesValues {
	v := seriesValues{
		verdictValues: verdictValues{state: uint8(cur), zeros: zeros, drifted: drifted, transitions: w.Transitions()},
		held:          [2]int32{w.HeldW, w.HeldS},
		claims:        w.Claims,
	}
	for i, n := range w.KillsByReason() {
		v.kills[i] = uint32(min(n, math.MaxUint32))
	}
	if drifted {
		v.drift = [3]int32{w.MissN, w.OrphN, w.OverCap}
	}
	return v
}

// metricHelpers makes metrics and points in the scope that scope last
// appended (the closures buildMetrics always had, shared by the workers'
// rows and the fleet's resource).
type metricHelpers struct {
	sm     pmetric.ScopeMetrics
	st, nt pcommon.Timestamp
	stale  bool // points flagged as having no recorded value (staleRow)
}

func (h *metricHelpers) scope(rm pmetric.ResourceMetrics) {
	h.sm = rm.ScopeMetrics().AppendEmpty()
	h.sm.Scope().SetName(scopeName)
}

func (h *metricHelpers) metric(name, unit, desc string) pmetric.Metric {
	m := h.sm.Metrics().AppendEmpty()
	m.SetName(name)
	m.SetUnit(unit)
	m.SetDescription(desc)
	return m
}

func (h *metricHelpers) gauge(name, unit, desc string) pmetric.NumberDataPointSlice {
	return h.metric(name, unit, desc).SetEmptyGauge().DataPoints()
}

func (h *metricHelpers) counter(name, unit, desc string) pmetric.NumberDataPointSlice {
	s := h.metric(name, unit, desc).SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	return s.DataPoints()
}

func (h *metricHelpers) point(dps pmetric.NumberDataPointSlice, v int64, cumulative bool, kv ...string) {
	dp := dps.AppendEmpty()
	dp.SetIntValue(v)
	dp.SetTimestamp(h.nt)
	if h.stale {
		dp.SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
	}
	if cumulative {
		dp.SetStartTimestamp(h.st)
	}
	a := dp.Attributes()
	a.EnsureCapacity(len(kv) / 2)
	for i := 0; i+1 < len(kv); i += 2 {
		a.PutStr(kv[i], kv[i+1])
	}
}

// renderRows appends one resource per row to md, the workers' series as
// buildMetrics says.
func renderRows(md pmetric.Metrics, rows []workerRow, start, now int64) {
	h := &metricHelpers{st: pcommon.Timestamp(start), nt: pcommon.Timestamp(now)}
	rms := md.ResourceMetrics()
	rms.EnsureCapacity(rms.Len() + len(rows))
	for i := range rows {
		r := &rows[i]
		h.stale = r.stale
		rm := rms.AppendEmpty()
		rm.Resource().Attributes().PutStr(contract.AttrWorkerID, r.id)
		h.scope(rm)
		sendVerdict, sendHeld, sendClaims := r.left&groupVerdict == 0, r.left&groupHeld == 0, r.left&groupClaims == 0
		if sendVerdict {
			states := h.gauge(contract.MetricState, "1", "Worker health state as a state set: 1 for the current state, 0 for the others.")
			for i, s := range contract.AllStates {
				if i == int(r.state) {
					h.point(states, 1, false, contract.AttrState, string(s))
				} else if r.zeros {
					h.point(states, 0, false, contract.AttrState, string(s))
				}
			}
			if anyPositive(r.transitions[:]) {
				trans := h.counter(contract.MetricStateTransitions, "{transition}", "State transitions by the state entered.")
				for i, n := range r.transitions {
					if n > 0 {
						h.point(trans, int64(n), true, contract.AttrState, string(contract.AllStates[i]))
					}
				}
			}
		}
		if sendHeld {
			active := h.gauge(contract.MetricRunsHeld, "{run}", "Runs the worker holds, by whose view.")
			h.point(active, int64(r.held[0]), false, contract.AttrSource, contract.SourceWorker)
			h.point(active, int64(r.held[1]), false, contract.AttrSource, contract.SourceScheduler)
		}
		if sendVerdict && r.drifted {
			drift := h.gauge(contract.MetricDrift, "{run}", "Runs in disagreement between scheduler and worker, older than the grace period.")
			h.point(drift, int64(r.drift[0]), false, contract.AttrDriftKind, contract.DriftMissing)
			h.point(drift, int64(r.drift[1]), false, contract.AttrDriftKind, contract.DriftOrphaned)
			h.point(drift, int64(r.drift[2]), false, contract.AttrDriftKind, contract.DriftOverCapacity)
		}
		if sendClaims {
			claims := h.counter(contract.MetricClaims, "{claim}", "Runs claimed by (worker) or assigned to (scheduler) the worker.")
			h.point(claims, r.claims[mapping.SideWorker], true, contract.AttrSource, contract.SourceWorker)
			h.point(claims, r.claims[mapping.SideScheduler], true, contract.AttrSource, contract.SourceScheduler)
		}
		if sendVerdict && anyPositive(r.kills[:]) {
			kills := h.counter(contract.MetricKills, "{run}", "Runs killed on the worker, by reason.")
			for i, n := range r.kills {
				if n > 0 {
					h.point(kills, int64(n), true, contract.AttrKillReason, state.KillReasonNames[i])
				}
			}
		}
	}
}

// points is how many data points renderRows makes of the row
// (TestRowPoints).
func (r *workerRow) points() int {
	n := 0
	if r.left&groupHeld == 0 {
		n += 2
	}
	if r.left&groupClaims == 0 {
		n += 2
	}
	if r.left&groupVerdict != 0 {
		return n
	}
	n++ // the current state
	if r.zeros {
		n += len(contract.AllStates) - 1
	}
	if r.drifted {
		n += 3
	}
	for _, c := range r.transitions {
		if c > 0 {
			n++
		}
	}
	for _, c := range r.kills {
		if c > 0 {
			n++
		}
	}
	return n
}

// buildFleet renders the fleet-wide resource.
func buildFleet(t *tracker.Tracker, start, now int64, byState []int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	h := &metricHelpers{st: pcommon.Timestamp(start), nt: pcommon.Timestamp(now)}
	h.scope(md.ResourceMetrics().AppendEmpty())
	fw := h.gauge(contract.MetricFleetWorkers, "{worker}", "Workers by health state.")
	for i, s := range contract.AllStates {
		h.point(fw, byState[i], false, contract.AttrState, string(s))
	}
	fleet := t.Fleet(now)
	h.point(h.gauge(contract.MetricFleetIdle, "{run}", "Free capacity on workers that may take work."), fleet.Idle, false)
	if fleet.Pending >= 0 {
		h.point(h.gauge(contract.MetricFleetPending, "{run}", "Runs pending at the scheduler (last report)."), fleet.Pending, false)
	}
	iwp := int64(0)
	if fleet.IdleWhilePending {
		iwp = 1
	}
	h.point(h.gauge(contract.MetricFleetIdlePending, "1", "1 while work was pending and healthy capacity idle for fleet.idle_intervals evaluations."), iwp, false)

	histo := func(name, desc string) pmetric.HistogramDataPointSlice {
		m := h.metric(name, "s", desc)
		hs := m.SetEmptyHistogram()
		hs.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		return hs.DataPoints()
	}
	hpoint := func(dps pmetric.HistogramDataPointSlice, x *state.Hist, k, v string) {
		if x.Count() == 0 {
			return
		}
		dp := dps.AppendEmpty()
		dp.SetStartTimestamp(h.st)
		dp.SetTimestamp(h.nt)
		dp.SetCount(x.Count())
		dp.SetSum(x.Sum())
		dp.ExplicitBounds().FromRaw(t.Hists().Bounds())
		dp.BucketCounts().FromRaw(x.Counts())
		if k != "" {
			dp.Attributes().PutStr(k, v)
		}
	}
	dur := histo(contract.MetricRunDuration, "Run duration from start to finish, by result.")
	for i, n := range state.ResultNames {
		if x := t.Hists().ByResult(i); x != nil {
			hpoint(dur, x, contract.AttrResult, n)
		}
	}
	hpoint(histo(contract.MetricClaimToStart, "Latency from the earliest claim to the run's start."), t.Hists().ClaimStart(), "", "")
	stg := histo(contract.MetricStageDuration, "Duration of a run's stage spans, by stage.")
	for _, s := range t.Hists().StageNames() {
		hpoint(stg, t.Hists().StageHist(s), contract.AttrStage, s)
	}
	return md
}

// resend is what an evaluation needs to leave out the workers whose series
// have not changed (resend_interval): an exporter such as Prometheus's
// keeps each series' last value until its metric_expiration, so sending a
// steady worker's series at every evaluation only costs the exporter
// (issue 24: at 100,000 workers the Prometheus exporter took one
// emission a minute). every is resend_interval in nanoseconds; sent
// collects the workers the emission holds, marked delivered (Worker.MarkSent)
// only once every pipeline took it: a superseded or refused emission's
// workers are sent again by the next evaluation.
type resend struct {
	every int64
	sent  []sentMark
	hint  int // how many workers the evaluation before sent: the slices' size
}

// due says whether a worker whose series have not changed since they were
// delivered at `at` is sent again at the evaluation at now: between half of
// resend_interval and all of it after `at`, at the worker's own phase of
// the interval (from its id) when that falls in this span, else at its
// start. So a fleet's resends are spread evenly over the interval, alike
// workers and workers sent together too: after a start or a wave of
// changes each worker reaches its phase within two intervals, and each
// evaluation then sends about emit_interval/resend_interval of the fleet.
// Before, the point came from the sum of the worker's values alone, and a
// fleet of alike workers (healthy, a run held on both sides: the same
// values) had one: 100,000 workers' 1.1 million points sent again in one
// evaluation every minute, 5 s of both cores on the test machine and the
// health API's slow window (docs/results/scaling.md, runs 25-27).
func (rs *resend) due(now, at int64, id string) bool {
	since := now - at
	if since >= rs.every {
		return true
	}
	half := rs.every / 2
	if since < half {
		return false
	}
	phase := int64(maphash.String(sumSeed, id) % uint64(rs.every))
	from := at + half
	next := from + ((phase-from)%rs.every+rs.every)%rs.every // the phase's first point from `from`
	return next > at+rs.every || now >= next
}

// sentMark is one worker sent, the sums of its series' values, and
// whether all its series were sent (else only the changed groups).
type sentMark struct {
	w    *tracker.Worker
	sums tracker.SeriesSums
	all  bool
}

// seriesValues are the values of a worker's series as buildMetrics sends
// them: equal values, equal series. Their hashes by group (sums) are the
// worker's sums for resend_interval (a collision, at odds of 2^-64 per
// change, delays a change by at most resend_interval).
//
// In 32 bits where a count cannot reach them (transitions at most one an
// evaluation, kills at most one a run, runs held at most limits.max_runs):
// an emission holds a row a worker, two emissions at most (one waiting, one
// being sent), and at 100,000 workers whose claims change at every
// evaluation they were 88 MB of a shard's live heap with 64-bit counts
// (docs/results/scaling.md, run 38), the heap the garbage collector marks.
type seriesValues struct {
	verdictValues
	held   [2]int32
	claims [2]int64
}

// verdictValues are the values of groupVerdict's series.
type verdictValues struct {
	state          uint8 // index in contract.AllStates
	zeros, drifted bool
	drift          [3]int32
	transitions    [6]uint32 // as Verdict.Transitions
	kills          [state.NKillReasons]uint32
}

// sumSeed: the sums live in memory only, so a seed per process will do.
var sumSeed = maphash.MakeSeed()

// anyPositive: a counter with no point is left out rather than sent empty.
func anyPositive(counts []uint32) bool {
	for _, n := range counts {
		if n > 0 {
			return true
		}
	}
	return false
}

// buildLogs renders one record per transition: the event stream outside
// systems react to (Taskcluster publishes worker-running/-stopped the same way).
func buildLogs(trs []tracker.Transition) plog.Logs {
	ld := plog.NewLogs()
	var sl plog.ScopeLogs
	for i, tr := range trs {
		// One resource per worker, as for the metrics (trs is sorted by
		// worker, and holds at most one transition per worker).
		if i == 0 || tr.Worker != trs[i-1].Worker {
			rl := ld.ResourceLogs().AppendEmpty()
			ra := rl.Resource().Attributes()
			ra.PutStr(contract.AttrWorkerID, tr.Worker)
			if tr.Name != "" {
				ra.PutStr(contract.AttrWorkerName, tr.Name)
			}
			sl = rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName(scopeName)
		}
		lr := sl.LogRecords().AppendEmpty()
		at := pcommon.Timestamp(tr.At)
		lr.SetTimestamp(at)
		lr.SetObservedTimestamp(at)
		lr.SetEventName(contract.EventStateChange)
		if contract.Severity(tr.To) > contract.Severity(tr.From) && tr.From != contract.Unknown || tr.To == contract.Unknown {
			lr.SetSeverityNumber(plog.SeverityNumberWarn)
			lr.SetSeverityText("WARN")
		} else {
			lr.SetSeverityNumber(plog.SeverityNumberInfo)
			lr.SetSeverityText("INFO")
		}
		codes := make([]string, 0, len(tr.Reasons))
		for _, r := range tr.Reasons {
			codes = append(codes, r.Code)
		}
		lr.Body().SetStr(fmt.Sprintf("worker %s: %s -> %s (%s)", tr.Worker, tr.From, tr.To, strings.Join(codes, ", ")))
		a := lr.Attributes()
		a.PutStr(contract.AttrEventName, contract.EventStateChange)
		a.PutStr(contract.AttrStateFrom, string(tr.From))
		a.PutStr(contract.AttrStateTo, string(tr.To))
		a.PutBool(contract.AttrMayTakeWork, tr.To.MayTakeWork())
		rs := a.PutEmptySlice(contract.AttrReasons)
		for _, r := range tr.Reasons {
			m := rs.AppendEmpty().SetEmptyMap()
			m.PutStr("code", r.Code)
			m.PutStr("message", r.Message)
			m.PutDouble("value", r.Value)
			m.PutDouble("threshold", r.Threshold)
			if !r.Since.IsZero() {
				m.PutStr("since", r.Since.Format(contract.TimeLayout))
			}
			putEvidence(m, &r)
		}
	}
	return ld
}

// putEvidence adds a reason's evidence beyond value and threshold to its
// map on a state-change record, under the health API's names
// (docs/http-api.md): only what the reason has.
func putEvidence(m pcommon.Map, r *contract.Reason) {
	if r.Role != "" {
		m.PutStr("role", r.Role)
	}
	if r.Samples > 0 {
		m.PutInt("samples", int64(r.Samples))
	}
	if !r.FiredAt.IsZero() {
		m.PutStr("fired_at", r.FiredAt.Format(contract.TimeLayout))
	}
	if r.Latched {
		m.PutBool("latched", true)
		if r.Current != nil {
			m.PutDouble("current", *r.Current)
		}
		if rc := r.Recovery; rc != nil {
			m.PutInt("recovery_samples", int64(rc.Samples))
			m.PutInt("recovery_needed", int64(rc.Needed))
			m.PutDouble("recovery_ratio", rc.Ratio)
		}
	}
	if r.Incarnation != "" {
		m.PutStr("incarnation", r.Incarnation)
	}
	if e := r.Exit; e != nil {
		m.PutStr("exit", e.How)
		if e.Code != nil {
			m.PutInt("exit_code", int64(*e.Code))
		}
		if e.Signal != nil {
			m.PutInt("exit_signal", int64(*e.Signal))
		}
	}
}
