//go:build e2e

package e2e

// The flood client of TestReliabilityFlood: the test binary re-executed with
// WW_FLOODER set (like the churner), so it runs as its own process, at a
// lower priority than the collector, as a sender on another machine would.
// It sends OTLP/gRPC as fast as one client can: for every batch of worker
// ids one metrics request (a gauge per id: a new series per id for the
// Prometheus exporter), one logs request (run-started events, a new run id
// each) and one traces request (run spans, a new run id each). Refused
// requests are counted and not retried: the flood never slows down.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// floodStats is what the flood client reports (WW_FLOOD_OUT, JSON, rewritten
// every second and at the end).
type floodStats struct {
	Workers, Runs       int64 // ids sent so far (accepted or not)
	Requests, Accepted  int64
	Refused, OtherError int64 // refused: the memory limiter's retryable codes
	FirstError          string
	Done                bool
	Seconds             float64
}

// floodMain is `<test binary>` with WW_FLOODER=1: WW_FLOOD_ADDR (OTLP/gRPC
// host:port), WW_FLOOD_WORKERS and WW_FLOOD_RUNS (totals), WW_FLOOD_BATCH
// (worker ids per request, default 100), WW_FLOOD_INFLIGHT (requests in
// flight, default 4), WW_FLOOD_SIGNALS (default "metrics,logs,traces"),
// WW_FLOOD_PASSES (default 1: every worker id once; 2 sends them all again,
// with new run ids, as a sender keeping its ids alive would), WW_FLOOD_OUT
// (the stats file), WW_FLOOD_PASS_GAP (a pause between passes, e.g. 15s:
// ids seen again two evaluations later count as seen more than once),
// WW_FLOOD_MIN_SECONDS (default 0: once the passes are sent and this long has
// not passed yet, it goes on with new worker ids until it has; a flood that
// ends within a probe's interval says nothing about the requests beside it).
func floodMain() int {
	env := func(k string, def int64) int64 {
		if v, err := strconv.ParseInt(os.Getenv(k), 10, 64); err == nil && v > 0 {
			return v
		}
		return def
	}
	addr, out := os.Getenv("WW_FLOOD_ADDR"), os.Getenv("WW_FLOOD_OUT")
	workers, runs := env("WW_FLOOD_WORKERS", 10000), env("WW_FLOOD_RUNS", 100000)
	batch, inflight := env("WW_FLOOD_BATCH", 100), env("WW_FLOOD_INFLIGHT", 4)
	passes := env("WW_FLOOD_PASSES", 1)
	gap, _ := time.ParseDuration(os.Getenv("WW_FLOOD_PASS_GAP"))
	minDur := time.Duration(env("WW_FLOOD_MIN_SECONDS", 0)) * time.Second
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		return 2
	}
	defer cc.Close()
	mc, lc, tc := pmetricotlp.NewGRPCClient(cc), plogotlp.NewGRPCClient(cc), ptraceotlp.NewGRPCClient(cc)

	var st floodStats
	var mu sync.Mutex // st.FirstError, the file
	began := time.Now()
	write := func(done bool) {
		mu.Lock()
		defer mu.Unlock()
		snap := floodStats{
			Workers: atomic.LoadInt64(&st.Workers), Runs: atomic.LoadInt64(&st.Runs),
			Requests: atomic.LoadInt64(&st.Requests), Accepted: atomic.LoadInt64(&st.Accepted),
			Refused: atomic.LoadInt64(&st.Refused), OtherError: atomic.LoadInt64(&st.OtherError),
			FirstError: st.FirstError, Done: done, Seconds: time.Since(began).Seconds(),
		}
		b, _ := json.Marshal(snap)
		_ = os.WriteFile(out+".tmp", b, 0o644)
		_ = os.Rename(out+".tmp", out)
	}
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
				write(false)
			}
		}
	}()

	count := func(err error) {
		atomic.AddInt64(&st.Requests, 1)
		if err == nil {
			atomic.AddInt64(&st.Accepted, 1)
			return
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.ResourceExhausted:
			atomic.AddInt64(&st.Refused, 1)
		default:
			atomic.AddInt64(&st.OtherError, 1)
		}
		mu.Lock()
		if st.FirstError == "" {
			st.FirstError = err.Error()
		}
		mu.Unlock()
	}
	send := func(f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		count(f(ctx))
	}

	signals := map[string]bool{}
	for _, sig := range strings.Split(cmp.Or(os.Getenv("WW_FLOOD_SIGNALS"), "metrics,logs,traces"), ",") {
		signals[strings.TrimSpace(sig)] = true
	}
	// Run ids per worker id: half in log records, the rest in spans.
	perWorker := max(runs/workers, 1)
	logRuns := (perWorker + 1) / 2
	spanRuns := perWorker - logRuns
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	var runSeq int64
	planned := passes * workers
	for i := int64(0); i < planned || time.Since(began) < minDur; i += batch {
		first := i % workers
		if i < planned && first == 0 && i > 0 && gap > 0 {
			wg.Wait()
			time.Sleep(gap)
		}
		n := min(batch, workers-first)
		if i >= planned {
			// Past the planned passes and still short of WW_FLOOD_MIN_SECONDS:
			// new ids, never sent before.
			first, n = workers+i-planned, batch
		}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = "flood-" + strconv.FormatInt(first+int64(i), 10)
		}
		var requests []func(context.Context) error
		if signals["metrics"] {
			md := floodMetrics(ids)
			requests = append(requests, func(ctx context.Context) error {
				_, err := mc.Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md))
				return err
			})
		}
		if signals["logs"] {
			ld := floodLogs(ids, logRuns, &runSeq)
			requests = append(requests, func(ctx context.Context) error {
				_, err := lc.Export(ctx, plogotlp.NewExportRequestFromLogs(ld))
				return err
			})
		}
		if signals["traces"] {
			td := floodTraces(ids, spanRuns, &runSeq)
			requests = append(requests, func(ctx context.Context) error {
				_, err := tc.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
				return err
			})
		}
		atomic.AddInt64(&st.Workers, n)
		atomic.AddInt64(&st.Runs, n*perWorker)
		for _, f := range requests {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				send(f)
			}()
		}
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone
	write(true)
	return 0
}

func floodResource(r pcommon.Resource, id string) {
	r.Attributes().PutStr("service.name", "flood")
	r.Attributes().PutStr(contract.AttrWorkerID, id)
}

func floodMetrics(ids []string) pmetric.Metrics {
	md := pmetric.NewMetrics()
	now := pcommon.NewTimestampFromTime(time.Now())
	for _, id := range ids {
		rm := md.ResourceMetrics().AppendEmpty()
		floodResource(rm.Resource(), id)
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName(contract.MetricRunsActive)
		m.SetUnit("{run}")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(now)
		dp.SetIntValue(1)
	}
	return md
}

func floodLogs(ids []string, perWorker int64, seq *int64) plog.Logs {
	ld := plog.NewLogs()
	now := pcommon.NewTimestampFromTime(time.Now())
	for _, id := range ids {
		rl := ld.ResourceLogs().AppendEmpty()
		floodResource(rl.Resource(), id)
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		for range perWorker {
			lr := lrs.AppendEmpty()
			lr.SetTimestamp(now)
			lr.SetEventName(contract.EventStarted)
			lr.Attributes().PutStr(contract.AttrRunID, "flood-run-"+strconv.FormatInt(atomic.AddInt64(seq, 1), 10))
		}
	}
	return ld
}

func floodTraces(ids []string, perWorker int64, seq *int64) ptrace.Traces {
	td := ptrace.NewTraces()
	now := time.Now()
	for _, id := range ids {
		rs := td.ResourceSpans().AppendEmpty()
		floodResource(rs.Resource(), id)
		spans := rs.ScopeSpans().AppendEmpty().Spans()
		for range perWorker {
			n := atomic.AddInt64(seq, 1)
			sp := spans.AppendEmpty()
			var tid [16]byte
			var sid [8]byte
			copy(tid[:], strconv.FormatInt(n, 36)+"-flood-trace")
			copy(sid[:], strconv.FormatInt(n, 36))
			sp.SetTraceID(tid)
			sp.SetSpanID(sid)
			sp.SetName("run")
			sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(-time.Second)))
			sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now))
			sp.Attributes().PutStr(contract.AttrRunID, "flood-run-"+strconv.FormatInt(n, 10))
			sp.Attributes().PutStr(contract.AttrWorkerID, id)
		}
	}
	return td
}
