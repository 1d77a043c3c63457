package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadata"
)

// forgetWorkerAfter: a worker silent this long is dropped from the metrics.
const forgetWorkerAfter = time.Hour

// tick reads the queue lengths and emits the metrics every
// collection_interval.
func (r *celeryReceiver) tick(ctx context.Context) {
	t := time.NewTicker(r.cfg.CollectionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.readQueues(ctx)
		r.catchUp(ctx)
		r.saveState(ctx)
		if r.metrics == nil {
			continue
		}
		md := r.collect(r.now())
		if md.DataPointCount() > 0 {
			if err := r.metrics.ConsumeMetrics(ctx, md); err != nil {
				r.logger.Debug("celery: the metrics pipeline refused points", zap.Error(err))
			}
		}
	}
}

// readQueues reads every configured queue's length; a queue that cannot be
// read is left out (its last value is not repeated).
func (r *celeryReceiver) readQueues(ctx context.Context) {
	if len(r.cfg.Queues) == 0 || r.tr == nil {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, r.cfg.CollectionInterval)
	defer cancel()
	lens, err := r.tr.queueLengths(qctx, r.cfg.Queues)
	if err != nil && ctx.Err() == nil {
		r.logger.Debug("celery: queue lengths not read", zap.Error(err))
	}
	r.mu.Lock()
	r.pending = lens
	r.mu.Unlock()
}

// collect builds the metrics: the broker's resource (queue lengths, each
// worker's heartbeat age and online state) and, for each worker that sent
// an event since the last collection, its own resource (a silent worker's
// resource must stay silent: any record of a worker is a sign of its life
// to the processor).
func (r *celeryReceiver) collect(now time.Time) pmetric.Metrics {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := pcommon.NewTimestampFromTime(now)
	hosts := make([]string, 0, len(r.workers))
	for h, w := range r.workers {
		if now.Sub(w.last) > forgetWorkerAfter {
			delete(r.workers, h)
			continue
		}
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	prefetched := r.prefetched()
	for _, q := range slices.Sorted(maps.Keys(r.pending)) {
		r.mb.RecordWorkerwatchSchedulerRunsPendingDataPoint(ts, r.pending[q], q)
	}
	for _, h := range hosts {
		w := r.workers[h]
		age := now.Sub(w.last).Seconds()
		r.mb.RecordCeleryWorkerHeartbeatAgeDataPoint(ts, age, h)
		r.mb.RecordCeleryWorkerOnlineDataPoint(ts, boolInt(r.online(w, now)), h)
	}
	rb := r.mb.NewResourceBuilder()
	rb.SetServiceName(serviceBroker)
	r.mb.EmitForResource(metadata.WithResource(rb.Emit()))
	for _, h := range hosts {
		w := r.workers[h]
		if !w.fresh {
			continue
		}
		w.fresh = false
		if c := r.cfg.capacity(h); c > 0 {
			r.mb.RecordWorkerwatchWorkerCapacityDataPoint(ts, int64(c))
		}
		if w.hasHB {
			r.mb.RecordWorkerwatchWorkerRunsActiveDataPoint(ts, w.active)
			r.mb.RecordCeleryWorkerTasksProcessedDataPoint(ts, w.processed)
		}
		for _, t := range slices.Sorted(maps.Keys(w.events)) {
			r.mb.RecordCeleryEventsDataPoint(ts, w.events[t], t)
		}
		for _, n := range slices.Sorted(maps.Keys(w.prefetchNames)) {
			r.mb.RecordCeleryWorkerTasksPrefetchedDataPoint(ts, prefetched[h][n], n)
		}
		for _, n := range slices.Sorted(maps.Keys(w.prefetch)) {
			r.mb.RecordCeleryTaskPrefetchTimeDataPoint(ts, w.prefetch[n], n)
		}
		rb := r.mb.NewResourceBuilder()
		rb.SetServiceName(serviceWorker)
		rb.SetCicdWorkerID(h)
		r.mb.EmitForResource(metadata.WithResource(rb.Emit()))
	}
	return r.mb.Emit()
}

// prefetched counts, per worker and task name, the tasks its current
// incarnation received and has not started (ETA tasks left out). r.mu is
// held.
func (r *celeryReceiver) prefetched() map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, t := range r.tasks {
		if t.started || t.eta {
			continue
		}
		if w := r.workers[t.worker]; w == nil || w.pid != t.pid {
			continue
		}
		m := out[t.worker]
		if m == nil {
			m = map[string]int64{}
			out[t.worker] = m
		}
		m[t.name]++
	}
	return out
}

// online: Flower's rule, the latest event younger than heartbeat_grace x
// freq, and no worker-offline since.
func (r *celeryReceiver) online(w *workerState, now time.Time) bool {
	if w.offline {
		return false
	}
	freq := w.freq
	if freq <= 0 {
		freq = 2 // Celery's default heartbeat interval
	}
	return now.Sub(w.last).Seconds() <= r.cfg.HeartbeatGrace*freq
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
