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
	held := in
	held.ID = "" // a process's name is not held: its pid and start time make it
	assert.Equal(t, held, cur.Get(), "what was set, as it was")
	assert.Equal(t, "4242@2026-01-02T03:05:05.000Z", cur.ID())
	assert.True(t, cur.Known())
	cur.Set(in)
	assert.Same(t, first, cur.Snapshot(), "unchanged: the same view")
	assert.Zero(t, testing.AllocsPerRun(10, func() { cur.Set(cur.Get()) }), "unchanged: nothing allocated")
	assert.Equal(t, contract.Incarnation{
		Source: contract.IncarnationTree, PID: 4242,
		Started: 1_767_323_105_000_000_000, FirstSeen: 1_767_323_110_000_000_000,
	}, *first)
	assert.Equal(t, "4242@2026-01-02T03:05:05.000Z", first.Name())

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
	assert.Equal(t, "4343", next.Name())
	other := Incarnation{ID: "4343@another-layout", Source: contract.IncarnationTree, PID: 4343}
	cur.Set(other) // a name its pid and start time do not make (a checkpoint's, say): held
	assert.Equal(t, "4343@another-layout", cur.ID())

	cur.Set(Incarnation{})
	assert.Nil(t, cur.Snapshot(), "none known again")
	assert.False(t, cur.Known())
	assert.Empty(t, cur.ID())
}
