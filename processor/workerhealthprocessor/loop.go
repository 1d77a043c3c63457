package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// evaluate judges, publishes the verdicts, sends the state-change records
// and returns the derived metrics to emit. Lock, build, unlock, then call
// out. ctx is the loop's: canceled by the first Shutdown, and checked before
// every call out (consumer, subscriber, storage), so a loop released late by
// a blocked consumer does nothing more.
func (p *healthProcessor) evaluate(ctx context.Context) *emission {
	// The time is read under the lock, so evaluations run in time order.
	p.mu.Lock()
	now := p.clock.Now().UnixNano()
	handed, stale := p.shard.handOver(p.tracker, now)
	trs, unjoined := p.tracker.Evaluate(now)
	paused := p.tracker.TakePause()
	var mTo []consumer.Metrics
	var lTo []consumer.Logs
	var mGone, lGone []*atomic.Bool
	for _, pl := range p.targets {
		if pl.metrics != nil {
			mTo, mGone = append(mTo, pl.metrics), append(mGone, &pl.gone)
		}
		if pl.logs != nil && len(trs) > 0 {
			lTo, lGone = append(lTo, pl.logs), append(lGone, &pl.gone)
		}
	}
	var rows []workerRow
	var fleet pmetric.Metrics
	var rs *resend
	if len(mTo) > 0 {
		if p.cfg.ResendInterval > 0 {
			rs = &resend{every: int64(p.cfg.ResendInterval), hint: p.lastSent}
		}
		rows, fleet = collectRows(p.tracker, p.startTime, now, rs)
		p.lastSent = len(rows)
		rows = append(rows, stale...)
	}
	var ld plog.Logs
	if len(lTo) > 0 {
		ld = buildLogs(trs)
	}
	var snap *contract.Snapshot
	if p.subscriber != nil {
		snap = p.tracker.Snapshot(now)
	}
	counts := p.tracker.TakeCounts()
	doCheckpoint := p.tracker.Evals()%p.cfg.CheckpointEvery == 0
	p.mu.Unlock()

	p.admissionTelemetry(ctx, &counts.Admission)
	p.count(ctx, p.tel.ProcessorWorkerHealthWorkersHandedOver, handed)
	p.count(ctx, p.tel.ProcessorWorkerHealthRecordsMalformed, counts.Malformed)
	p.judgeTelemetry(ctx, counts.Healed, counts.Unjoined, unjoined)

	if paused > 0 {
		p.logger.Warn("this evaluation ran long after the previous one: the collector was paused or starved of CPU; "+
			"silence during the pause is not counted against the workers (lost.after and stalled.after count from now)",
			zap.Duration("gap", time.Duration(paused)), zap.Duration("emit_interval", p.cfg.EmitInterval))
	}
	for _, tr := range trs {
		p.logger.Debug("worker state changed", zap.String("worker", tr.Worker),
			zap.String("from", string(tr.From)), zap.String("to", string(tr.To)))
	}
	// The verdicts first: whatever the consumers do, the health API has
	// this evaluation now.
	p.publish(ctx, snap)
	if len(lTo) > 0 {
		for i, c := range lTo {
			if ctx.Err() != nil || lGone[i].Load() {
				continue
			}
			out := ld
			if i < len(lTo)-1 {
				out = plog.NewLogs()
				ld.CopyTo(out)
			}
			// In pieces, as the metrics: a wave of state changes over the
			// whole fleet (every worker judged after a start) is one record
			// per worker, and an exporter converts what it is handed at once.
			for _, piece := range splitLogs(out, emitChunk) {
				if ctx.Err() != nil {
					break
				}
				records := int64(piece.LogRecordCount())
				if err := c.ConsumeLogs(ctx, piece); err != nil {
					p.tel.ProcessorWorkerHealthRefusedLogRecords.Add(context.Background(), records)
					p.logger.Debug("the next consumer refused the state-change records", zap.Error(err))
					continue
				}
				p.tel.ProcessorWorkerHealthEmittedLogRecords.Add(context.Background(), records)
			}
		}
	}
	if doCheckpoint {
		p.cpMu.Lock()
		if ctx.Err() == nil {
			p.writeCheckpoint(ctx)
		}
		p.cpMu.Unlock()
	}
	if len(mTo) == 0 {
		return nil
	}
	em := &emission{rows: rows, fleet: fleet, to: mTo, gone: mGone, start: p.startTime, at: now}
	if rs != nil {
		em.sent = rs.sent
	}
	return em
}

// offer leaves em for the emitter, replacing an emission it has not taken
// yet (counted as superseded, once per metrics pipeline, as the others).
func (p *healthProcessor) offer(ctx context.Context, em *emission) {
	if em == nil {
		return
	}
	p.latest.mu.Lock()
	old := p.latest.pending
	if old != nil {
		// The ends of series it carried are not in the newer one (those
		// workers are gone from the tracker): they go with it.
		for _, r := range old.rows {
			if r.stale {
				em.rows = append(em.rows, r)
			}
		}
	}
	p.latest.pending = em
	p.latest.mu.Unlock()
	if old != nil {
		p.count(ctx, p.tel.ProcessorWorkerHealthSupersededMetricPoints, old.points()*int64(len(old.to)))
	}
	select {
	case p.latest.wake <- struct{}{}:
	default: // the emitter has a wake-up already
	}
}

// take empties the slot.
func (p *healthProcessor) take() *emission {
	p.latest.mu.Lock()
	defer p.latest.mu.Unlock()
	em := p.latest.pending
	p.latest.pending = nil
	return em
}

// emitChunk is how many resources (workers) one ConsumeMetrics call of an
// emission carries at most, and emitPoints about how many data points
// (pieceEnds). An exporter converts what it is handed at once:
// an emission of every series of 100,000 workers in one call (742,509
// points) took a remote-write shard's RSS from 772 MiB to 1.3 GiB while it
// was converted (`make scale-figures`, docs/results/scaling.md); in pieces,
// what an exporter holds at a time is one piece's. The pieces are rendered
// as they are sent (renderRows), so the emission itself holds no pdata.
// 1,000 rather than 5,000: the remote-write exporter converts and
// compresses a piece of 5,000 workers for tens of milliseconds without
// letting go of its CPU, and the health API's requests waited behind it
// (docs/results/scaling.md, runs 29 to 33). And at most about 1,000
// points, whatever the workers' shapes: a piece is converted in one burst
// of the emitter's goroutine, which the Go scheduler lets run up to 10 ms
// before it preempts it, and a request that waits for a P waits behind the
// burst; 1,000 workers are 11,000 points just after a start and 2,000 when
// only their claims changed. (The p99 with this bound, runs 41-45, did not
// differ from the one without it beyond the noise: it bounds the burst,
// not a measured gain.) Prometheus's own remote write sends up to 2,000
// samples a request.
const (
	emitChunk  = 1000
	emitPoints = 1000
)

// pieceEnds is where the pieces of rows end: at emitChunk rows, or after
// the row that brings a piece to emitPoints points. One piece at least (the
// fleet's resource goes in the last, rows or none).
func pieceEnds(rows []workerRow) []int {
	var ends []int
	n, points := 0, 0
	for i := range rows {
		n, points = n+1, points+rows[i].points()
		if n == emitChunk || points >= emitPoints {
			ends = append(ends, i+1)
			n, points = 0, 0
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] < len(rows) {
		ends = append(ends, len(rows))
	}
	return ends
}

// sendMetrics hands one emission to each metrics pipeline still running,
// in pieces (pieceEnds), the fleet-wide resource in the last. Each pipeline
// gets its own pieces: a downstream processor may mutate them.
func (p *healthProcessor) sendMetrics(ctx context.Context, em *emission) {
	if em == nil {
		return
	}
	delivered := true
	ends := pieceEnds(em.rows)
	pc := pacer{start: time.Now(), budget: p.cfg.EmitInterval / 2, total: len(em.to) * len(ends)}
	for i, c := range em.to {
		if ctx.Err() != nil || em.gone[i].Load() {
			delivered = false
			continue
		}
		from := 0
		for k, to := range ends {
			if ctx.Err() != nil { // shutting down: the rest is not sent
				delivered = false
				break
			}
			began := time.Now()
			piece := pmetric.NewMetrics()
			renderRows(piece, em.rows[from:to], em.start, em.at)
			from = to
			if k == len(ends)-1 {
				em.fleet.ResourceMetrics().At(0).CopyTo(piece.ResourceMetrics().AppendEmpty())
			}
			points := int64(piece.DataPointCount())
			if err := c.ConsumeMetrics(ctx, piece); err != nil {
				p.tel.ProcessorWorkerHealthRefusedMetricPoints.Add(context.Background(), points)
				p.logger.Debug("the next consumer refused the derived metrics", zap.Error(err))
				delivered = false
				continue
			}
			p.tel.ProcessorWorkerHealthEmittedMetricPoints.Add(context.Background(), points)
			p.yield(ctx, em, pc.pause(time.Since(began)))
		}
	}
	if delivered && len(em.sent) > 0 {
		// Only now are these workers' series downstream: those of an
		// emission a pipeline refused or did not take are sent again by the
		// next evaluation (resend_interval).
		p.mu.Lock()
		for _, s := range em.sent {
			s.w.MarkSent(s.sums, em.at, s.all)
		}
		p.mu.Unlock()
	}
}

// pacer says how long the emitter pauses after each piece of one
// emission: as long as the piece took, so that an emission uses at most
// half of one CPU, while the emission, paused so to its end, still ends
// within budget (half of emit_interval) of its start; else not at all. An
// emission is background work beside the health API in one process: sent
// flat out it kept the CPU busy (with the evaluation, the extension's view
// and the garbage collector) for a second in every emit_interval, and
// requests that arrived then waited 10-30 ms for the Go scheduler
// (docs/results/scaling.md, run 30's execution trace); the Go runtime has
// no priorities to ask for room instead. The budget keeps an emission that
// takes most of emit_interval as it was, rather than stretched into the
// next evaluation's.
type pacer struct {
	start       time.Time
	budget      time.Duration
	busy        time.Duration // the pieces' time so far, pauses not counted
	done, total int
}

func (pc *pacer) pause(took time.Duration) time.Duration {
	pc.busy += took
	pc.done++
	left := pc.total - pc.done
	if left <= 0 || took <= 0 {
		return 0
	}
	perPiece := pc.busy / time.Duration(pc.done)
	if time.Since(pc.start)+took+time.Duration(left)*2*perPiece > pc.budget {
		return 0
	}
	return took
}

// yield pauses the emitter for d between two pieces of em, unless a newer
// emission waits (then the rest goes at once: the emission must not fall
// behind), the processor stops, or em is the ends of series at shutdown.
func (p *healthProcessor) yield(ctx context.Context, em *emission, d time.Duration) {
	if em.final || d <= 0 {
		return
	}
	p.latest.mu.Lock()
	newer := p.latest.pending != nil
	p.latest.mu.Unlock()
	if newer {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// splitLogs moves ld's resources (one per worker), in order, into pieces of
// at most n (ld itself when it has no more than n).
func splitLogs(ld plog.Logs, n int) []plog.Logs {
	rls := ld.ResourceLogs()
	if rls.Len() <= n {
		return []plog.Logs{ld}
	}
	pieces := make([]plog.Logs, 0, (rls.Len()+n-1)/n)
	for from := 0; from < rls.Len(); from += n {
		piece := plog.NewLogs()
		dst := piece.ResourceLogs()
		dst.EnsureCapacity(min(n, rls.Len()-from))
		for i := from; i < min(from+n, rls.Len()); i++ {
			rls.At(i).MoveTo(dst.AppendEmpty())
		}
		pieces = append(pieces, piece)
	}
	return pieces
}
