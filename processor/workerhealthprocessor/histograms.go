package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"
	"encoding/json"

	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The histograms' state is state.Histograms (internal/state/histograms.go);
// reading their checkpoint is the processor's.

// restoreHists reads the checkpointed histograms. Unreadable ones are
// counted and start over; so do histograms of other bounds (logged).
func (p *healthProcessor) restoreHists(ctx context.Context) {
	raw, err := p.storage.Get(ctx, cpHistsKey)
	if err != nil || raw == nil {
		if err != nil {
			p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
			p.logger.Warn("reading the checkpointed histograms failed; they start over", zap.Error(err))
		}
		return
	}
	var c state.HistsRecord
	if err := json.Unmarshal(raw, &c); err != nil || len(raw) > cpMaxRecord {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.logger.Warn("the checkpointed histograms are unreadable; they start over", zap.Error(err))
		return
	}
	p.mu.Lock()
	ok := p.tracker.hists.Restore(&c)
	p.mu.Unlock()
	if !ok {
		p.logger.Info("histogram_buckets changed since the checkpoint: the histograms start over")
	}
}
