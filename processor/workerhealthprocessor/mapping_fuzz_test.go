package workerhealthprocessor

// Fuzz tests of the lifecycle-event mapping: log records and spans built from
// fuzzed names, ids and attribute values of every pdata type and any size go
// through the mapper and through the whole processor (ingest + evaluation).
// Properties: no panic; data passes through unchanged; every event the
// mapper yields is bounded (ids within limits.max_attribute_length, capacity
// within its range); the tracker stays within its limits.
//
// Plain `go test` replays the seeds and testdata/fuzz/<FuzzName>/;
// `go test -run '^$' -fuzz FuzzMapLogs -fuzztime 2m .` explores further.

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// fuzzValue sets v to one of pdata's value types chosen by typ, from s, n, f.
func fuzzValue(v pcommon.Value, typ uint8, s string, n int64, f float64) {
	switch typ % 8 {
	case 0:
		v.SetStr(s)
	case 1:
		v.SetInt(n)
	case 2:
		v.SetDouble(f)
	case 3:
		v.SetBool(n%2 == 0)
	case 4:
		v.SetEmptyBytes().FromRaw([]byte(s))
	case 5:
		sl := v.SetEmptySlice()
		sl.AppendEmpty().SetStr(s)
		sl.AppendEmpty().SetInt(n)
	case 6:
		m := v.SetEmptyMap()
		m.PutStr(s, s)
	case 7:
		// leave empty (ValueTypeEmpty)
	}
}

// fuzzCase is one fuzzed record: the strings are the event name, worker id,
// run id and an attribute value; typ picks the types of the id attributes,
// sched whether the resource is the scheduler's.
type fuzzCase struct {
	event, worker, run, value string
	typ                       uint8
	n                         int64
	f                         float64
	sched                     bool
}

// The attributes the default mapping reads, in the order typ's bits pick
// which one gets the odd-typed value.
var fuzzKeys = []string{
	"cicd.worker.id", "cicd.pipeline.run.id", "cicd.pipeline.result", "error.type",
	"workerwatch.kill.reason", "workerwatch.worker.capacity", "event.name",
}

func (c fuzzCase) resource(res pcommon.Resource) {
	a := res.Attributes()
	if c.sched {
		a.PutStr("service.name", "workersim-scheduler")
	} else {
		a.PutStr("service.name", "worker")
		if c.typ&0x80 == 0 {
			a.PutStr("cicd.worker.id", c.worker)
		} else {
			fuzzValue(a.PutEmpty("cicd.worker.id"), c.typ>>4, c.worker, c.n, c.f)
		}
	}
	a.PutStr("cicd.worker.name", c.value)
}

func (c fuzzCase) attrs(a pcommon.Map) {
	a.PutStr("cicd.worker.id", c.worker)
	a.PutStr("cicd.pipeline.run.id", c.run)
	a.PutStr("cicd.pipeline.result", c.value)
	a.PutStr("error.type", c.value)
	a.PutStr("workerwatch.kill.reason", c.value)
	a.PutInt("workerwatch.worker.capacity", c.n)
	// One key gets a value of an odd type.
	fuzzValue(a.PutEmpty(fuzzKeys[int(c.typ)%len(fuzzKeys)]), c.typ>>3, c.value, c.n, c.f)
}

// eventNames maps the fuzzer's small selector to a configured event name, so
// that most inputs exercise a lifecycle kind and not only the skip path.
var eventNames = []string{
	"workerwatch.run.claimed", "workerwatch.run.started", "workerwatch.run.finished",
	"workerwatch.run.killed", "workerwatch.run.released", "workerwatch.worker.heartbeat",
}

func pickEvent(name string, typ uint8) string {
	if typ%3 == 0 {
		return name
	}
	return eventNames[int(typ)%len(eventNames)]
}

func addSeeds(f *testing.F) {
	long := strings.Repeat("w", 5000)
	for _, s := range []fuzzCase{
		{"workerwatch.run.claimed", "worker-1", "run-1", "success", 0, 1, 0.5, false},
		{"workerwatch.run.finished", "worker-1", "run-1", "timeout", 2, 3, 1, true},
		{"workerwatch.run.killed", "w", "r", "memory_limit", 5, -1, math.NaN(), true},
		{"", "", "", "", 0, 0, 0, false},
		{"x", "worker\x00id", "run\xff\xfe", "\x00", 7, math.MinInt64, math.Inf(1), false},
		{"workerwatch.run.started", long, long, long, 1, math.MaxInt64, 1e300, false},
		{"workerwatch.worker.heartbeat", "w-1", "", "", 0x85, 1 << 20, math.Copysign(0, -1), false},
		{"run", "../../etc/passwd", "%00", "<script>alert(1)</script>", 0xff, 7, 1 << 21, true},
		{"compile", "w\u202e", strings.Repeat("é", 600), "{{.}}", 0x33, -5, -1e-300, false},
	} {
		f.Add(s.event, s.worker, s.run, s.value, s.typ, s.n, s.f, s.sched)
	}
}

func FuzzMapLogs(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, event, workerID, run, value string, typ uint8, n int64, fl float64, sched bool) {
		c := fuzzCase{pickEvent(event, typ), workerID, run, value, typ, n, fl, sched}
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		c.resource(rl.Resource())
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		lr := lrs.AppendEmpty()
		lr.SetEventName(c.event)
		lr.SetTimestamp(pcommon.Timestamp(uint64(n)))
		c.attrs(lr.Attributes())
		// A second record names its event through the attribute only.
		lr2 := lrs.AppendEmpty()
		lr2.Attributes().PutStr("event.name", c.event)
		c.attrs(lr2.Attributes())

		cfg := testCfg()
		b := &mapping.Batch{}
		b.Reset()
		mapping.New(cfg.mappingSettings()).Logs(ld, b)
		checkBatch(t, cfg, b)

		before, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, cfg)
		for range 3 {
			h.logs(ld)
			h.advance(time.Second)
			h.eval()
		}
		after, _ := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		if !bytes.Equal(before, after) {
			t.Fatal("the processor changed the logs passing through")
		}
		checkTracker(t, cfg, h)
	})
}

func FuzzMapSpans(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, name, workerID, run, value string, typ uint8, n int64, fl float64, sched bool) {
		c := fuzzCase{name, workerID, run, value, typ, n, fl, sched}
		switch typ % 4 { // mostly the names the mapping reads
		case 0:
			c.event = "run"
		case 1:
			c.event = "execute"
		}
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		c.resource(rs.Resource())
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetName(c.event)
		// Any order of start and end, including end before start and 0.
		sp.SetStartTimestamp(pcommon.Timestamp(uint64(n)))
		sp.SetEndTimestamp(pcommon.Timestamp(uint64(fl)))
		c.attrs(sp.Attributes())

		cfg := testCfg()
		b := &mapping.Batch{}
		b.Reset()
		mapping.New(cfg.mappingSettings()).Traces(td, b)
		checkBatch(t, cfg, b)

		before, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, cfg)
		for range 3 {
			h.traces(td)
			h.advance(time.Second)
			h.eval()
		}
		after, _ := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
		if !bytes.Equal(before, after) {
			t.Fatal("the processor changed the traces passing through")
		}
		checkTracker(t, cfg, h)
	})
}

func checkBatch(t *testing.T, cfg *Config, b *mapping.Batch) {
	t.Helper()
	maxLen := cfg.Limits.MaxAttributeLength
	if len(b.Events) > 3 { // one "seen" per resource, one event per record
		t.Fatalf("%d events from one resource with two records", len(b.Events))
	}
	for _, e := range b.Events {
		if e.Worker == "" || len(e.Worker) > maxLen || len(e.Run) > maxLen || len(e.Name) > maxLen ||
			len(e.Result) > maxLen || len(e.KillReason) > maxLen {
			t.Fatalf("event out of bounds: worker %d bytes, run %d, name %d, result %d, reason %d",
				len(e.Worker), len(e.Run), len(e.Name), len(e.Result), len(e.KillReason))
		}
		if e.Capacity < -1 || e.Capacity >= 1<<20 {
			t.Fatalf("capacity %d", e.Capacity)
		}
		if e.Kind > mapping.KindStage {
			t.Fatalf("kind %d", e.Kind)
		}
		if e.Kind != mapping.KindSeen && e.Kind != mapping.KindHeartbeat && e.Kind != mapping.KindStage && e.Run == "" {
			t.Fatalf("run event %d without a run id", e.Kind)
		}
	}
}

func checkTracker(t *testing.T, cfg *Config, h *harness) {
	t.Helper()
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	ws := h.p.tracker.ByID()
	if len(ws) > cfg.Limits.MaxWorkers {
		t.Fatalf("%d workers tracked", len(ws))
	}
	for _, w := range ws {
		id := w.ID()
		if id == "" || len(id) > cfg.Limits.MaxAttributeLength || len(w.Name) > cfg.Limits.MaxAttributeLength {
			t.Fatalf("worker id %d bytes, name %d bytes", len(id), len(w.Name))
		}
		if w.Table.Len() > cfg.Limits.MaxRunsPerWorker {
			t.Fatalf("%d runs", w.Table.Len())
		}
		for _, k := range w.KillsByReason() {
			if k < 0 {
				t.Fatalf("kills %v", w.KillsByReason())
			}
		}
		if !w.State.Valid() {
			t.Fatalf("state %q", w.State)
		}
	}
}
