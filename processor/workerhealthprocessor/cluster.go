package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"time"

	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// The processor as one shard of a gateway tier behind the load_balancing
// exporter (docs/scaling.md). A clustered worker_health extension knows the
// exporter's ring; through it the processor
//   - forgets the workers another shard owns since the ring changed, at the
//     next evaluation, so a worker that moved is neither judged `lost` here
//     nor emitted by two shards, and
//   - reads the scheduler's pending count from the shard that receives it
//     (the gauge names no worker, so the exporter routes it to one shard),
//     for the stall and idle-while-pending rules.
// Without such an extension every worker is owned and nothing changes.

const (
	// handOverWarnAfter: records for a worker another shard owns keep
	// arriving for this long after its first hand-over. After a ring change
	// they stop within the agents' resolver interval (seconds); longer means
	// this shard's ring and the agents' disagree (cluster.self, or the
	// members, written differently from the exporter's).
	handOverWarnAfter = time.Minute
	handOverWarnEvery = 10 * time.Minute
)

type shard struct {
	logger *zap.Logger
	owners []contract.Ownership
	fleets []contract.ClusterFleet
	// handed: per worker handed over lately, its first and last hand-over.
	handed   map[string][2]int64
	warnedAt int64
}

// newShard takes the cluster hooks of the health extension (health_extension);
// nil without one, or when it has none.
func newShard(sub contract.Subscriber, logger *zap.Logger) *shard {
	s := &shard{logger: logger, handed: map[string][2]int64{}}
	if o, ok := sub.(contract.Ownership); ok {
		s.owners = append(s.owners, o)
	}
	if f, ok := sub.(contract.ClusterFleet); ok {
		s.fleets = append(s.fleets, f)
	}
	if len(s.owners) == 0 && len(s.fleets) == 0 {
		return nil
	}
	return s
}

func (s *shard) owns(id string) bool {
	for _, o := range s.owners {
		if !o.Owns(id) {
			return false
		}
	}
	return true
}

// handOver forgets the workers this shard does not own and takes the
// cluster's pending count; it returns how many workers were forgotten, and
// the rows that end the series of those this shard exported (staleRow): the
// new owner exports them now, and without the end this shard's last values
// would stand beside the new owner's until they expire (a Prometheus
// exporter's metric_expiration; a pushed series, Prometheus's lookback).
// Called under the processor's lock, before evaluate.
func (s *shard) handOver(t *tracker.Tracker, now int64) (int64, []workerRow) {
	if s == nil {
		return 0, nil
	}
	t.SetClusterPending(-1, 0)
	for _, f := range s.fleets {
		if n, at, ok := f.ClusterPending(); ok && at.UnixNano() > t.ClusterPendingAt() {
			t.SetClusterPending(n, at.UnixNano())
		}
	}
	if len(s.owners) == 0 {
		return 0, nil
	}
	// The pending gauge names no worker: the exporter routes it with the
	// empty id. A shard that no longer owns the empty id stops reporting its
	// last figure at once (the new owner has it), so the fleet's pending count
	// is exported by one shard even across a ring change.
	var n int64
	var stuck string
	var stale []workerRow
	t.Disown(s.owns, func(w *tracker.Worker) {
		n++
		id := w.ID()
		h, seen := s.handed[id]
		if !seen {
			h[0] = now
			// The first time only: disowned again, a worker was made by
			// records that still came here after the move, since the last
			// evaluation, and never exported.
			if r, ok := staleRow(w, now); ok {
				stale = append(stale, r)
			}
		}
		h[1] = now
		s.handed[id] = h
		if now-h[0] > int64(handOverWarnAfter) {
			stuck = id
		}
	})
	for id, h := range s.handed {
		if now-h[1] > int64(handOverWarnAfter) {
			delete(s.handed, id) // its records stopped: the move is done
		}
	}
	if stuck != "" && (s.warnedAt == 0 || now-s.warnedAt > int64(handOverWarnEvery)) {
		s.warnedAt = now
		s.logger.Warn("records keep arriving for workers the shard ring gives to another shard: "+
			"the agents' load_balancing resolver and the worker_health extension's cluster config disagree "+
			"(cluster.self and the members must be written as the exporter writes them); these workers are not judged here",
			zap.String("worker", stuck), zap.Int("workers", len(s.handed)))
	}
	return n, stale
}
