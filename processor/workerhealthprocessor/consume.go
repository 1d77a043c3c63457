package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// ingest applies one extracted batch under the lock.
func (p *healthProcessor) ingest(b *mapping.Batch) {
	now := p.clock.Now().UnixNano()
	p.mu.Lock()
	p.tracker.Apply(b, now)
	due := p.tracker.TakeExitDue()
	p.mu.Unlock()
	b.Reset()
	p.pool.Put(b)
	if due > 0 {
		// A root exited: evaluate when its grace ends (a little after, so
		// that the grace has passed on the evaluation's clock).
		p.clock.AfterFunc(time.Duration(due-now)+10*time.Millisecond, p.wakeForExit)
	}
}

// wakeForExit asks the timer loop for an evaluation (one is enough for
// several exits due at once).
func (p *healthProcessor) wakeForExit() {
	select {
	case p.exitDue <- struct{}{}:
	default:
	}
}

func (p *healthProcessor) getBatch() *mapping.Batch { return p.pool.Get().(*mapping.Batch) }

func (p *healthProcessor) processTraces(_ context.Context, td ptrace.Traces) (ptrace.Traces, error) {
	b := p.getBatch()
	p.mapper.Traces(td, b)
	p.ingest(b)
	return td, nil
}

func (p *healthProcessor) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	b := p.getBatch()
	p.mapper.Metrics(md, b)
	p.ingest(b)
	if p.cfg.Limits.DropUntrackedMetrics && p.dropUntracked(ctx, md) {
		return md, processorhelper.ErrSkipProcessingData
	}
	return md, nil
}

// dropUntracked removes the resources that name a worker the processor does
// not track, has seen only once, or names by a malformed id (internal/tracker/admission.go:
// a flood of ids must not become a flood of series in the exporters), and
// reports whether nothing is left.
func (p *healthProcessor) dropUntracked(ctx context.Context, md pmetric.Metrics) bool {
	var dropped int64
	p.mu.Lock()
	md.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		r, ok := p.mapper.Resource(rm.Resource())
		if ok && (r.Src == mapping.SideScheduler || r.ID == "") {
			return false
		}
		if w := p.tracker.Worker(r.ID); ok && w != nil && w.Evidence != state.EvidenceOnce {
			return false
		}
		dropped += int64(resourcePoints(rm))
		return true
	})
	p.mu.Unlock()
	p.count(ctx, p.tel.ProcessorWorkerHealthDroppedMetricPoints, dropped)
	return dropped > 0 && md.ResourceMetrics().Len() == 0
}

func resourcePoints(rm pmetric.ResourceMetrics) int {
	n := 0
	sms := rm.ScopeMetrics()
	for i := 0; i < sms.Len(); i++ {
		ms := sms.At(i).Metrics()
		for j := 0; j < ms.Len(); j++ {
			m := ms.At(j)
			switch m.Type() {
			case pmetric.MetricTypeGauge:
				n += m.Gauge().DataPoints().Len()
			case pmetric.MetricTypeSum:
				n += m.Sum().DataPoints().Len()
			case pmetric.MetricTypeHistogram:
				n += m.Histogram().DataPoints().Len()
			case pmetric.MetricTypeExponentialHistogram:
				n += m.ExponentialHistogram().DataPoints().Len()
			case pmetric.MetricTypeSummary:
				n += m.Summary().DataPoints().Len()
			}
		}
	}
	return n
}

func (p *healthProcessor) processLogs(_ context.Context, ld plog.Logs) (plog.Logs, error) {
	b := p.getBatch()
	p.mapper.Logs(ld, b)
	p.ingest(b)
	return ld, nil
}
