package workerhealthprocessor

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		id      string
		file    string
		check   func(t *testing.T, c *Config)
		wantErr string
	}{
		{id: "worker_health", check: func(t *testing.T, c *Config) {
			assert.Equal(t, createDefaultConfig(), c)
		}},
		{id: "worker_health/custom", check: func(t *testing.T, c *Config) {
			assert.Equal(t, 2*time.Second, c.EmitInterval)
			assert.Equal(t, component.MustNewIDWithName("worker_health", "api"), *c.HealthExtension)
			assert.Equal(t, component.MustNewIDWithName("file_storage", "health"), *c.StorageID)
			assert.Equal(t, []string{"lightning"}, c.Scheduler.ServiceNames)
			assert.Equal(t, []schedSource{
				{name: "lightning", view: "claims_only", keys: []string{"worker_name", "cicd.worker.id"}, interval: 30 * time.Second, life: "claims"},
				{name: "queue-snapshots", view: "snapshots", keys: []string{"worker_name", "cicd.worker.id"}, interval: 15 * time.Second, life: "any"},
			}, c.schedulers())
			assert.Equal(t, []string{"worker_name", "cicd.worker.id"}, c.idKeys())
			assert.Equal(t, int64(268435456), c.Memory.Roles["main"].SoftLimitBytes)
			assert.Equal(t, "unhealthy", c.Kills.Effects["memory_limit"])
			assert.Equal(t, "none", c.Kills.Effects["timeout"], "a reason left out keeps its default")
			assert.Equal(t, 30*time.Second, c.Drift.HealAfter)
			assert.Equal(t, int64(536870912), c.Memory.SoftLimitBytes)
			assert.Equal(t, 20, c.Capacity.PerWorker["big-worker"])
			assert.Equal(t, 10, c.Limits.MaxUnconfirmedWorkers)
			assert.Equal(t, 500, c.Limits.MaxRuns)
			assert.False(t, c.Limits.DropUntrackedMetrics)
			assert.False(t, c.Stalled.RequirePending)
		}},
		{id: "worker_health/bad_emit", wantErr: "emit_interval: must be at least 1s, got 0s"},
		{id: "worker_health/bad_ratio", wantErr: "memory.soft_limit_ratio"},
		{id: "worker_health/bad_kill_reason", wantErr: `kills.effects: unknown kill reason "exploded"`},
		{id: "worker_health/bad_kill_effect", wantErr: `kills.effects: "timeout": unknown effect "furious"`},
		{id: "worker_health/bad_view", wantErr: `scheduler.sources[0].view: unknown view "telepathy"`},
		{id: "worker_health/bad_life", wantErr: `scheduler.sign_of_life: unknown value "sometimes"`},
		{id: "worker_health/bad_source", wantErr: `scheduler.sources[0].service_name: service name "lightning" is listed twice`},
		{id: "worker_health/bad_role_limit", wantErr: `memory.roles: "main": soft_limit_bytes must be positive`},
		{id: "worker_health/bad_heal", wantErr: "drift.heal_after: must be longer than drift.grace"},
		{id: "worker_health/no_id", wantErr: "mapping.worker_id_attributes: must name at least one attribute"},
		{id: "worker_health/bad_cpu", wantErr: "cpu.recovery_cores"},
		{id: "worker_health/bad_ttl", wantErr: "limits.worker_ttl"},
		{id: "worker_health/bad_limits", wantErr: "limits.max_runs_per_worker"},
		{id: "worker_health/bad_admission", wantErr: "limits.max_unconfirmed_workers: must not be negative, got -1"},
		{id: "worker_health/bad_admission", wantErr: "limits.max_runs: must be at least 1, got 0"},
		{id: "worker_health/bad_grace", wantErr: "drift.tombstone_ttl"},
		{id: "worker_health/openfn", file: "openfn.yaml", check: func(t *testing.T, c *Config) {
			assert.Equal(t, []string{"worker_name", "cicd.worker.id"}, c.idKeys())
			assert.Equal(t, []string{"claim"}, c.Mapping.Events.Claimed)
			assert.Equal(t, []string{"run:start"}, c.Mapping.Events.Started)
			assert.Equal(t, []string{"kill", "crash"}, c.Mapping.KillResults)
			assert.Equal(t, "claims_only", c.schedulers()[0].view)
			assert.Equal(t, int64(512<<20), c.Memory.Roles["main"].SoftLimitBytes)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			file := tt.file
			if file == "" {
				file = "config.yaml"
			}
			cm, err := confmaptest.LoadConf(filepath.Join("testdata", file))
			require.NoError(t, err)
			var id component.ID
			require.NoError(t, id.UnmarshalText([]byte(tt.id)))
			sub, err := cm.Sub(id.String())
			require.NoError(t, err)
			cfg := createDefaultConfig()
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, cfg.(*Config))
		})
	}
}

func loadOpenFn(t *testing.T) *Config {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "openfn.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub("worker_health/openfn")
	require.NoError(t, err)
	cfg := testCfg()
	require.NoError(t, sub.Unmarshal(cfg))
	return cfg
}

// OpenFn's events, as its worker would send them, through the example mapping.
func TestOpenFnMapping(t *testing.T) {
	cfg := loadOpenFn(t)
	cfg.Memory.SoftLimitBytes = 1000
	h := newHarness(t, cfg)
	send := func(event, run string, attrs map[string]any) {
		ld := workerLogs("ws-worker", rec{worker: "", event: event, run: "", attrs: attrs})
		lr := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0)
		lr.Attributes().PutStr("worker_name", "openfn-1")
		if run != "" {
			lr.Attributes().PutStr("run_id", run)
		}
		lr.SetTimestamp(pcommon.NewTimestampFromTime(h.clock.Now()))
		ld.ResourceLogs().At(0).Resource().Attributes().Remove("cicd.worker.id")
		h.logs(ld)
	}
	send("run:start", "a", nil)
	h.advance(2 * time.Second)
	send("run:complete", "a", map[string]any{"reason": "success"})
	for i, et := range []string{"OOMError", "TimeoutError", "OOMError"} {
		run := string(rune('b' + i))
		send("run:start", run, nil)
		send("run:complete", run, map[string]any{"reason": "kill", "error_type": et})
	}
	h.eval()
	w := h.worker("openfn-1")
	require.NotNil(t, w)
	assert.Equal(t, int64(2), w.kills[killReasonIndex["memory_limit"]])
	assert.Equal(t, int64(1), w.kills[killReasonIndex["timeout"]])
	assert.Equal(t, healthy, w.state, "runs killed by their own limits are the runs' fault")
	assert.NotContains(t, h.codes("openfn-1"), codeKills)
	for _, run := range []string{"e", "f", "g"} {
		send("run:start", run, nil)
		send("run:complete", run, map[string]any{"reason": "crash", "error_type": "ExitError"})
	}
	h.eval()
	assert.Equal(t, int64(3), w.kills[killReasonIndex["crash"]])
	assert.Equal(t, unhealthy, w.state, "3 crashes within the window are the worker's")
	assert.Contains(t, h.codes("openfn-1"), codeKills)
	assert.Equal(t, int64(7), w.claims[srcWorker], "run:start counts as the claim")
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Equal(t, uint64(1), h.p.tracker.hists.byResult[resultIndex("success")].count)
	assert.Equal(t, uint64(6), h.p.tracker.hists.byResult[resultIndex("error")].count)
}

// Malformed records are counted and skipped; the rest of the batch applies
// and the data passes through unchanged.
func TestMalformedRecords(t *testing.T) {
	h := newHarness(t, testCfg())
	huge := strings.Repeat("x", 10_000)
	ld := workerLogs("worker",
		rec{worker: "w1", event: "workerwatch.run.claimed"},                                                      // no run id
		rec{worker: "w1", event: "workerwatch.run.claimed", attrs: map[string]any{"cicd.pipeline.run.id": 42}},   // wrong type
		rec{worker: "w1", event: "workerwatch.run.claimed", attrs: map[string]any{"cicd.pipeline.run.id": huge}}, // huge
		rec{worker: "w1", event: "workerwatch.run.claimed", run: "ok"},
		rec{worker: "w1", event: "not.a.lifecycle.event"},
	)
	// A resource whose worker id has the wrong type.
	bad := ld.ResourceLogs().AppendEmpty()
	bad.Resource().Attributes().PutInt("cicd.worker.id", 7)
	bad.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetEventName("workerwatch.run.claimed")
	// A scheduler record without a worker id.
	sch := schedLogs(rec{worker: "w1", event: "workerwatch.run.claimed", run: "s1"})
	sch.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().Remove("cicd.worker.id")
	sch.ResourceLogs().MoveAndAppendTo(ld.ResourceLogs())

	before := ld.ResourceLogs().Len()
	out, err := h.p.processLogs(context.Background(), ld)
	require.NoError(t, err)
	assert.Equal(t, before, out.ResourceLogs().Len(), "passes through unchanged")

	// Metrics with NaN and negative values, a span run without a run id.
	md := treeMetrics("w1", -5, -1, 1)
	h.metrics(md)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("cicd.worker.id", "w1")
	rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("run")
	h.traces(td)

	h.p.mu.Lock()
	malformed := h.p.tracker.malformed
	w := h.p.tracker.workers["w1"]
	okRun := w.runs.has("ok")
	h.p.mu.Unlock()
	assert.Equal(t, int64(6), malformed)
	assert.True(t, okRun, "the valid record after the malformed ones applied")
	assert.Equal(t, 1, w.runs.len())
	assert.Equal(t, int64(-1), w.rss, "a negative memory sample is ignored")
}

func TestLimits(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.MaxWorkers = 2
	cfg.Limits.MaxUnconfirmedWorkers = 2
	cfg.Limits.MaxRunsPerWorker = 3
	h := newHarness(t, cfg)
	for _, w := range []string{"a", "b", "c"} {
		h.logs(wl(w, "workerwatch.worker.heartbeat", "", nil))
	}
	for _, r := range []string{"r1", "r2", "r3", "r4"} {
		h.logs(wl("a", "workerwatch.run.claimed", r, nil))
	}
	// Ended runs make room.
	h.logs(wl("a", "workerwatch.run.finished", "r1", nil))
	h.logs(wl("a", "workerwatch.run.claimed", "r5", nil))
	h.p.mu.Lock()
	assert.Len(t, h.p.tracker.workers, 2)
	// Issue 14.7: counted once per resource naming it (it was counted
	// twice: the resource's sign of life and its record).
	assert.Equal(t, int64(1), h.p.tracker.counts.workersRefused[refusedMaxWorkers], "c, once")
	assert.Equal(t, int64(1), h.p.tracker.counts.runsRefused[refusedRunsPerWorker])
	assert.True(t, h.p.tracker.workers["a"].runs.has("r5"))
	h.p.mu.Unlock()

	// Workers are forgotten after the TTL.
	h.advance(2 * time.Minute)
	h.eval()
	h.p.mu.Lock()
	assert.Empty(t, h.p.tracker.workers)
	assert.Equal(t, int64(2), h.p.tracker.counts.workersExpired[evidenceOnce])
	h.p.mu.Unlock()
}

// At the per-worker cap the oldest run neither side holds makes room, held
// runs are kept whatever their age, and the bookkeeping of the order stays
// bounded by the cap however many runs pass through.
func TestRunEvictionAtTheCap(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.MaxRunsPerWorker = 4
	h := newHarness(t, cfg)
	claim := func(r string) { h.logs(wl("a", "workerwatch.run.claimed", r, nil)) }
	finish := func(r string) {
		h.logs(wl("a", "workerwatch.run.finished", r, map[string]any{"cicd.pipeline.result": "success"}))
	}
	claim("held") // the oldest, and still held
	for _, r := range []string{"r1", "r2", "r3"} {
		claim(r)
		finish(r)
	}
	claim("r4") // evicts r1: the oldest that ended, not "held"
	h.p.mu.Lock()
	runs := &h.p.tracker.workers["a"].runs
	assert.True(t, runs.has("held"))
	assert.False(t, runs.has("r1"))
	assert.True(t, runs.has("r2"))
	assert.True(t, runs.has("r4"))
	h.p.mu.Unlock()

	for i := 0; i < 1000; i++ {
		r := "x" + strconv.Itoa(i)
		claim(r)
		finish(r)
	}
	h.p.mu.Lock()
	w := h.p.tracker.workers["a"]
	assert.True(t, w.runs.has("held"))
	assert.Equal(t, 4, w.runs.len())
	assert.LessOrEqual(t, len(w.order), 2*4+8, "order is compacted")
	assert.Zero(t, h.p.tracker.counts.runsRefused, "ended runs always made room")
	h.p.mu.Unlock()
}

// One instance behind three pipelines: shared state, emission into the
// metrics and logs pipelines only, the timer stopped by the first Shutdown,
// the instance dropped by the last.
func TestSharedInstanceLifecycle(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	f := newFactory(withClock(clock))
	cfg := testCfg()
	healthID := component.MustNewID("worker_health")
	cfg.HealthExtension = &healthID
	set := processortest.NewNopSettings(metadata.Type)
	ctx := context.Background()
	tSink, mSink, lSink := new(consumertest.TracesSink), new(consumertest.MetricsSink), new(consumertest.LogsSink)
	tp, err := f.CreateTraces(ctx, set, cfg, tSink)
	require.NoError(t, err)
	mp, err := f.CreateMetrics(ctx, set, cfg, mSink)
	require.NoError(t, err)
	lp, err := f.CreateLogs(ctx, set, cfg, lSink)
	require.NoError(t, err)

	sub := &subscriber{}
	h := host{ext: map[component.ID]component.Component{healthID: sub}}
	for _, c := range []component.Component{tp, mp, lp} {
		require.NoError(t, c.Start(ctx, h))
	}
	require.NotNil(t, sub.last(), "published at start")

	// Spans in the traces pipeline change the state the others emit.
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("cicd.worker.id", "w1")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName("http.request")
	require.NoError(t, tp.ConsumeTraces(ctx, td))
	require.Equal(t, 1, tSink.SpanCount(), "passed through")
	require.NoError(t, mp.ConsumeMetrics(ctx, treeMetrics("w2", 10, -1, 1)))
	require.Len(t, mSink.AllMetrics(), 1, "passed through")

	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(cfg.EmitInterval)
	require.Eventually(t, func() bool { return len(lSink.AllLogs()) == 1 && len(mSink.AllMetrics()) == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 1, lSink.LogRecordCount(), "w2's first transition; w1 was seen once (by its spans)")
	assert.NotContains(t, metricsByWorker(mSink.AllMetrics()[1]), "w1", "a worker seen once is not exported")

	// w1's spans again, two intervals later: it is announced and exported.
	clock.Advance(cfg.EmitInterval)
	require.Eventually(t, func() bool { return len(mSink.AllMetrics()) == 3 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, tp.ConsumeTraces(ctx, td))
	clock.Advance(cfg.EmitInterval)
	require.Eventually(t, func() bool { return len(lSink.AllLogs()) == 2 && len(mSink.AllMetrics()) == 4 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 2, lSink.LogRecordCount(), "w1's state announced once seen again")
	assert.Equal(t, 2, tSink.SpanCount(), "nothing emitted into traces")
	byWorker := metricsByWorker(mSink.AllMetrics()[3])
	for _, w := range []string{"w1", "w2"} {
		for _, n := range []string{contract.MetricState, contract.MetricStateTransitions, contract.MetricRunsHeld, contract.MetricDrift, contract.MetricClaims} {
			assert.Contains(t, byWorker[w], n, "%s on the resource of %s", n, w)
		}
	}
	for _, n := range []string{contract.MetricFleetWorkers, contract.MetricFleetIdle} {
		assert.Contains(t, byWorker[""], n, "%s on the fleet resource", n)
	}
	require.Eventually(t, func() bool {
		s := sub.last()
		return len(s.Workers) == 2 && s.Workers[0].State == contract.Healthy
	}, 5*time.Second, 5*time.Millisecond)

	// The first Shutdown stops the timer: the collector shuts every
	// pipeline down together, and the traces pipeline's exporter may already
	// be gone while the metrics pipeline's wrapper still runs.
	require.NoError(t, tp.Shutdown(ctx))
	require.NoError(t, clock.BlockUntilContext(ctx, 0))
	require.NoError(t, mp.Shutdown(ctx))
	// The last one drops the instance: a new pipeline build with the same
	// config gets a fresh one, which publishes at start and knows none of the
	// old instance's workers.
	require.NoError(t, lp.Shutdown(ctx))
	mp2, err := f.CreateMetrics(ctx, set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	sub2 := &subscriber{}
	h.ext[healthID] = sub2
	require.NoError(t, mp2.Start(ctx, h))
	require.NotNil(t, sub2.last())
	assert.Empty(t, sub2.last().Workers, "a fresh instance")
	require.NoError(t, mp2.Shutdown(ctx))
}

// A restart restores drift and evidence; restored workers are unknown, never
// healthy, until they report again.
func TestRestoreAfterRestart(t *testing.T) {
	store := &memStorage{}
	storageID := component.MustNewID("file_storage")
	cfg := testCfg()
	cfg.StorageID = &storageID
	cfg.Lost.After = time.Minute
	// The test evaluates by hand: a timer that fired as it advances the
	// clock would evaluate beside it (a data race on the worker it reads).
	cfg.EmitInterval = time.Hour
	ctx := context.Background()
	h1 := newHarness(t, cfg)
	sub := &subscriber{}
	healthID := component.MustNewID("worker_health")
	cfg.HealthExtension = &healthID
	hst := host{ext: map[component.ID]component.Component{storageID: store, healthID: sub}}
	pl1 := &pipeline{}
	require.NoError(t, h1.p.start(ctx, hst, pl1))
	// w1: scheduler holds a run the worker does not (missing); w2: memory latch.
	hb(h1)
	h1.logs(sl("w1", "workerwatch.run.claimed", "r1"))
	for i := 0; i < 3; i++ {
		h1.metrics(treeMetrics("w2", 5000, -1, 1))
	}
	h1.advance(5 * time.Second)
	h1.p.tick(ctx)
	require.Equal(t, degraded, h1.state("w1"))
	require.Equal(t, unhealthy, h1.state("w2"))
	require.NoError(t, h1.p.shutdown(ctx, pl1))

	h2 := newHarness(t, cfg)
	h2.clock.Advance(10 * time.Second)
	sub2 := &subscriber{}
	hst.ext[healthID] = sub2
	pl2 := &pipeline{}
	require.NoError(t, h2.p.start(ctx, hst, pl2))
	snap := sub2.last()
	require.Len(t, snap.Workers, 2)
	for _, w := range snap.Workers {
		assert.Equal(t, contract.Unknown, w.State, "restored as unknown")
		// Before: restored workers had no reason at all.
		require.Len(t, w.Reasons, 1, "restored as unknown, with a reason")
		assert.Equal(t, codeNotReported, w.Reasons[0].Code)
	}
	assert.Equal(t, []string{"r1"}, snap.Workers[0].Runs.Scheduler)

	restored := h2.clock.Now()
	h2.advance(time.Second)
	h2.eval()
	assert.Equal(t, unknown, h2.state("w1"), "no telemetry since the restart: never healthy")
	// Evaluated, it keeps saying why, since the restore (before: the
	// reason lost "restored" and its since went back to when the previous
	// process first saw the worker).
	r := h2.reason(codeNotReported)
	assert.Contains(t, r.Message, "restored from the checkpoint")
	assert.Equal(t, restored, r.Since)
	assert.Equal(t, unhealthy, h2.state("w2"), "restored evidence still counts")
	hb(h2)
	h2.eval()
	assert.Equal(t, degraded, h2.state("w1"), "drift survived the restart")
	assert.Contains(t, h2.codes("w1"), codeMissing)
	require.NoError(t, h2.p.shutdown(ctx, pl2))
}

func TestDerivedMetricsShape(t *testing.T) {
	h := newHarness(t, testCfg())
	h.metrics(treeMetrics("w1", 10, -1, 1)) // its tree: confirmed, exported
	h.logs(workerLogs("worker",
		rec{worker: "w1", event: "workerwatch.run.claimed", run: "r1", ts: t0},
		rec{worker: "w1", event: "workerwatch.run.started", run: "r1", ts: t0.Add(time.Second)},
		rec{
			worker: "w1", event: "workerwatch.run.killed", run: "r1", ts: t0.Add(4 * time.Second),
			attrs: map[string]any{"workerwatch.kill.reason": "oom", "cicd.pipeline.result": "error"},
		},
	))
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("cicd.worker.id", "w1")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName("compile")
	sp.SetStartTimestamp(1e9)
	sp.SetEndTimestamp(3e9)
	h.traces(td)
	h.eval()
	h.p.mu.Lock()
	md := h.p.tracker.buildMetrics(t0.UnixNano(), h.clock.Now().UnixNano())
	h.p.mu.Unlock()
	byWorker := metricsByWorker(md)
	byName := byWorker["w1"]
	for n, m := range byWorker[""] {
		byName[n] = m
	}
	st := byName[contract.MetricState].Gauge().DataPoints()
	require.Equal(t, len(contract.AllStates), st.Len())
	ones := 0
	for i := 0; i < st.Len(); i++ {
		ones += int(st.At(i).IntValue())
	}
	assert.Equal(t, 1, ones, "exactly one state is current")
	k := byName[contract.MetricKills].Sum().DataPoints().At(0)
	v, _ := k.Attributes().Get(contract.AttrKillReason)
	assert.Equal(t, "oom", v.Str())
	d := byName[contract.MetricRunDuration].Histogram().DataPoints().At(0)
	assert.Equal(t, uint64(1), d.Count())
	assert.InDelta(t, 3.0, d.Sum(), 1e-9)
	assert.Equal(t, uint64(1), byName[contract.MetricStageDuration].Histogram().DataPoints().At(0).Count())
	assert.Equal(t, uint64(1), byName[contract.MetricClaimToStart].Histogram().DataPoints().At(0).Count())
}

// A killed run's span and its killed record travel through different
// pipelines: whichever arrives first, the kill is counted, and only once.
func TestKillCountedWhateverArrivesFirst(t *testing.T) {
	runSpan := func(run string) ptrace.Traces {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("cicd.worker.id", "w1")
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetName("run")
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(4 * time.Second)))
		sp.Attributes().PutStr("cicd.pipeline.run.id", run)
		sp.Attributes().PutStr("cicd.pipeline.result", "timeout")
		return td
	}
	killed := func(run string) plog.Logs {
		return wl("w1", "workerwatch.run.killed", run, map[string]any{"workerwatch.kill.reason": "timeout", "cicd.pipeline.result": "timeout"})
	}
	h := newHarness(t, testCfg())
	h.traces(runSpan("span-first"))
	h.logs(killed("span-first"))
	h.logs(killed("log-first"))
	h.traces(runSpan("log-first"))
	h.logs(killed("log-first")) // a duplicate
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Equal(t, int64(2), h.p.tracker.workers["w1"].kills[killReasonIndex["timeout"]])
}
