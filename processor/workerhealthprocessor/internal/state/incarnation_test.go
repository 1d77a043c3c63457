package state

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// An evaluation hands on the view it built before while the incarnation is
// unchanged, and a new one, leaving the published one as it was, as soon as
// anything in it changes, in place (a later source's pid and start time) or
// as a new process.
func TestIncarnationSnapshotReused(t *testing.T) {
	var cur CurrentIncarnation
	assert.Nil(t, cur.Snapshot(), "no incarnation known")
	assert.Equal(t, Incarnation{}, cur.Get())

	in := Incarnation{Source: contract.IncarnationTree, PID: 4242, Started: 1_767_323_105_000_000_000, FirstSeen: 1_767_323_110_000_000_000}
	in.Name()
	cur.Set(in)
	first := cur.Snapshot()
	require.NotNil(t, first)
	assert.Equal(t, in, cur.Get(), "what was set, as it was")
	cur.Set(in)
	assert.Same(t, first, cur.Snapshot(), "unchanged: the same view")
	assert.Zero(t, testing.AllocsPerRun(10, func() { cur.Set(cur.Get()) }), "unchanged: nothing allocated")
	assert.Equal(t, contract.Incarnation{
		ID: "4242@2026-01-02T03:05:05.000Z", Source: contract.IncarnationTree, PID: 4242,
		Started: 1_767_323_105_000_000_000, FirstSeen: 1_767_323_110_000_000_000,
	}, *first)

	in.Started += 1_000_000 // restated in place
	cur.Set(in)
	moved := cur.Snapshot()
	assert.NotSame(t, first, moved)
	assert.Equal(t, contract.Time(1_767_323_105_001_000_000), moved.Started)
	assert.Equal(t, contract.Time(1_767_323_105_000_000_000), first.Started, "what was published stays as it was")

	in = Incarnation{Source: contract.IncarnationTree, PID: 4343, FirstSeen: 1_767_323_200_000_000_000}
	in.Name()
	cur.Set(in)
	next := cur.Snapshot()
	assert.NotSame(t, moved, next)
	assert.Equal(t, "4343", next.ID)

	cur.Set(Incarnation{})
	assert.Nil(t, cur.Snapshot(), "none known again")
}
