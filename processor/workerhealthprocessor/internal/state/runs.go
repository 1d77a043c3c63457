package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"cmp"
	"slices"
	"unicode/utf8"
)

// Runs is a worker's runs and what it says of them: its capacity
// (reported by the worker, -1 = not reported), the runs claimed by each
// source (cumulative) and the last claim by the worker itself.
type Runs struct {
	Claims    [2]int64 // cumulative by source
	LastClaim int64

	Table RunTable
	// Order holds the runs in the order they were first seen, from
	// OrderHead on (runs no longer tracked are skipped and compacted away):
	// at the per-worker cap the oldest ended run is evicted in amortized
	// O(1), not by a scan of every run for each new one.
	Order []*Run
	// Capacity and OrderHead: 32 bits each, one word for both (this is
	// kept per worker). The mapping takes a capacity below 2^20 only (a
	// restored one is clamped), and OrderHead is an index into Order, which
	// CompactOrder keeps within about twice the runs tracked.
	Capacity  int32
	OrderHead int32
}

// CompactOrder forgets the entries of runs no longer tracked once order is
// more than about twice the runs tracked, so it stays bounded by the run cap.
func (x *Runs) CompactOrder() {
	if len(x.Order) <= 2*x.Table.Len()+8 {
		return
	}
	n := 0
	for _, r := range x.Order[x.OrderHead:] {
		if r != nil && !r.Has(RunGone) {
			x.Order[n] = r
			n++
		}
	}
	clear(x.Order[n:])
	x.Order, x.OrderHead = x.Order[:n], 0
}

// RunsRecord is the runs' checkpoint record.
type RunsRecord struct {
	Capacity  int                  `json:"cap"`
	Claims    [2]int64             `json:"claims"`
	LastClaim int64                `json:"last_claim"`
	Runs      map[string]RunRecord `json:"runs,omitempty"`
}

// RunRecord is one run's checkpoint record.
type RunRecord struct {
	WAt     int64  `json:"wa,omitempty"`
	SAt     int64  `json:"sa,omitempty"`
	WEnd    int64  `json:"we,omitempty"`
	SEnd    int64  `json:"se,omitempty"`
	ClaimTS int64  `json:"c,omitempty"`
	StartTS int64  `json:"s,omitempty"`
	Flags   uint16 `json:"f"`
	EndTS   int64  `json:"e,omitempty"`
	Result  uint8  `json:"r,omitempty"`
	Kill    uint8  `json:"k,omitempty"`
	Attempt uint16 `json:"n,omitempty"`
}

// Checkpoint is the runs' record.
func (x *Runs) Checkpoint() RunsRecord {
	c := RunsRecord{Capacity: int(x.Capacity), Claims: x.Claims, LastClaim: x.LastClaim}
	if x.Table.Len() > 0 {
		c.Runs = make(map[string]RunRecord, x.Table.Len())
		for r := range x.Table.All() {
			c.Runs[string(r.ID())] = RunRecord{
				WAt: r.WAt, SAt: r.SAt, WEnd: r.WEnd, SEnd: r.SEnd, ClaimTS: r.ClaimTS, StartTS: r.StartTS,
				Flags: r.Flags, EndTS: r.EndTS, Result: r.Result, Kill: r.Kill, Attempt: r.Attempt,
			}
		}
	}
	return c
}

// Restore takes checkpointed runs back, at most maxPerWorker for the worker
// and maxTotal for the processor (total counts them there), with ids the
// mapping would have taken (valid UTF-8, at most maxIDLen bytes). It tells
// whether it stopped at a cap.
func (x *Runs) Restore(c *RunsRecord, maxPerWorker, maxTotal, maxIDLen int, total *int) (refused bool) {
	x.Capacity, x.Claims, x.LastClaim = Clamp32(c.Capacity), c.Claims, c.LastClaim
	if len(c.Runs) == 0 {
		return false
	}
	for rid, r := range c.Runs {
		if x.Table.Len() >= maxPerWorker || *total >= maxTotal {
			refused = true
			break
		}
		if rid == "" || len(rid) > maxIDLen || !utf8.ValidString(rid) {
			continue // not an id the mapping would have taken
		}
		*total++
		rr := &Run{
			WAt: r.WAt, SAt: r.SAt, WEnd: r.WEnd, SEnd: r.SEnd,
			ClaimTS: r.ClaimTS, StartTS: r.StartTS, Flags: r.Flags &^ (RunGone | RunListed),
			EndTS: r.EndTS, Result: r.Result, Kill: r.Kill, Attempt: r.Attempt,
		}
		rr.SetID(rid)
		x.Table.Put(rr, RunHash(rid))
		x.Order = append(x.Order, rr)
	}
	// First seen = the earlier side's claim (0 when never claimed).
	slices.SortFunc(x.Order, func(a, b *Run) int {
		return cmp.Compare(firstSeen(a), firstSeen(b))
	})
	return refused
}

// firstSeen is when a run was first claimed by either side (0 = never).
func firstSeen(r *Run) int64 {
	switch {
	case r.WAt == 0:
		return r.SAt
	case r.SAt == 0:
		return r.WAt
	}
	return min(r.WAt, r.SAt)
}
