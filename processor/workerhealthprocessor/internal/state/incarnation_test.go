package state

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// An evaluation hands on the view it built before while the incarnation is
// unchanged, and builds a new one, leaving the published one as it was, as
// soon as anything in it changes, in place (a later source's pid and start
// time) or as a new process.
func TestIncarnationSnapshotReused(t *testing.T) {
	var none Incarnation
	assert.Nil(t, none.Snapshot(), "no incarnation known")

	in := Incarnation{Source: contract.IncarnationTree, PID: 4242, Started: 1_767_323_105_000_000_000, FirstSeen: 1_767_323_110_000_000_000}
	in.Name()
	first := in.Snapshot()
	require.NotNil(t, first)
	assert.Same(t, first, in.Snapshot(), "unchanged: the same view")
	assert.Zero(t, testing.AllocsPerRun(10, func() { in.Snapshot() }), "unchanged: nothing allocated")
	assert.Equal(t, contract.Incarnation{
		ID: "4242@2026-01-02T03:05:05.000Z", Source: contract.IncarnationTree, PID: 4242,
		Started: 1_767_323_105_000_000_000, FirstSeen: 1_767_323_110_000_000_000,
	}, *first)

	in.Started += 1_000_000 // restated in place
	moved := in.Snapshot()
	assert.NotSame(t, first, moved)
	assert.Equal(t, contract.Time(1_767_323_105_001_000_000), moved.Started)
	assert.Equal(t, contract.Time(1_767_323_105_000_000_000), first.Started, "what was published stays as it was")

	in = Incarnation{Source: contract.IncarnationTree, PID: 4343, FirstSeen: 1_767_323_200_000_000_000}
	in.Name()
	next := in.Snapshot()
	assert.NotSame(t, moved, next)
	assert.Equal(t, "4343", next.ID)
}
