package contract

// Sharded gateways (docs/scaling.md): N collectors behind the load_balancing
// exporter, each judging the workers whose cicd.worker.id the exporter's
// consistent hash gives it. The worker_health extension's `cluster` config
// knows the same ring; the processor asks it through these two optional
// interfaces, which a Subscriber may also implement.

import "time"

// Ownership is implemented by a subscriber that knows the shard ring. A
// worker this collector does not own (it moved to another shard when the
// ring changed) is forgotten by the processor, not judged `lost` here nor
// emitted by two shards. Without a cluster nothing implements it and every
// worker is owned.
type Ownership interface {
	// Owns reports whether this collector is the shard that owns the worker
	// now. Safe for concurrent use; cheap (a hash and a binary search).
	Owns(workerID string) bool
}

// ClusterFleet is implemented by a subscriber that reads the other shards'
// fleet figures. The scheduler's pending gauge names no worker, so the
// exporter routes it to one shard only; the others judge `stalled`
// (stalled.require_pending) and idle-while-pending with this figure.
type ClusterFleet interface {
	// ClusterPending is the scheduler's pending count as another shard last
	// reported it, and the time of that shard's snapshot; ok is false when
	// no other shard reports one.
	ClusterPending() (pending int64, at time.Time, ok bool)
}

// What the health API of a sharded gateway says about a worker it cannot
// give its owner's verdict for (state Unknown, HTTP 503): reason codes.
const (
	// ReasonMoving: the ring changed a moment ago and the worker's new owner
	// has not judged it yet (docs/scaling.md gives the bound).
	ReasonMoving = "moving"
	// ReasonOwnerUnreachable: the shard that owns the worker does not
	// answer (it is down and still in the ring).
	ReasonOwnerUnreachable = "owner_unreachable"
)

// The health API's cluster parameters (docs/http-api.md).
const (
	// QueryScope with ScopeLocal asks one shard for its own workers only:
	// what the shards ask each other. Without it a shard answers for the
	// whole fleet.
	QueryScope = "scope"
	ScopeLocal = "local"
	// HeaderShard names the shard (its ring member name) whose verdict a
	// response carries.
	HeaderShard = "X-Workerwatch-Shard"
)
