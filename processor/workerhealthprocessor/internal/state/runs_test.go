package state

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func addRun(x *Runs, id string, wAt, sAt int64, flags uint16) *Run {
	r := &Run{WAt: wAt, SAt: sAt, Flags: flags}
	r.SetID(id)
	x.Table.Put(r, RunHash(id))
	x.Order = append(x.Order, r)
	return r
}

// The record keeps every field; restoring it gives the same runs, ordered by
// the earlier side's claim, without the transient flags.
func TestRunsCheckpointRoundTrip(t *testing.T) {
	x := Runs{Capacity: 2, Claims: [2]int64{5, 3}, LastClaim: 40}
	addRun(&x, "late", 30, 0, RunWorkerHeld|RunListed)
	r := addRun(&x, "early", 0, 10, RunSchedEnded|RunGone)
	r.WEnd, r.SEnd, r.ClaimTS, r.StartTS, r.EndTS, r.Result, r.Kill = 1, 2, 3, 4, 5, 6, 7
	addRun(&x, "mid", 25, 20, RunWorkerEnded)

	rec := x.Checkpoint()
	require.Len(t, rec.Runs, 3)
	assert.Equal(t, RunRecord{SEnd: 2, WEnd: 1, SAt: 10, ClaimTS: 3, StartTS: 4, Flags: RunSchedEnded | RunGone, EndTS: 5, Result: 6, Kill: 7}, rec.Runs["early"])

	var y Runs
	total := 0
	assert.False(t, y.Restore(&rec, 10, 10, 64, &total))
	assert.Equal(t, 3, total)
	assert.Equal(t, int32(2), y.Capacity)
	assert.Equal(t, [2]int64{5, 3}, y.Claims)
	assert.Equal(t, int64(40), y.LastClaim)
	var order []string
	for _, r := range y.Order {
		order = append(order, string(r.ID()))
	}
	assert.Equal(t, []string{"early", "mid", "late"}, order)
	assert.Equal(t, RunWorkerHeld, y.Table.Get("late", RunHash("late")).Flags, "listed is transient")
	assert.Equal(t, RunSchedEnded, y.Table.Get("early", RunHash("early")).Flags, "gone is transient")
}

// Restoring stops at either cap and says so; ids the mapping would refuse
// are skipped.
func TestRunsRestoreLimits(t *testing.T) {
	rec := RunsRecord{Runs: map[string]RunRecord{"a": {WAt: 1}, "b": {WAt: 2}, "c": {WAt: 3}}}
	var x Runs
	total := 0
	assert.True(t, x.Restore(&rec, 2, 10, 64, &total), "per-worker cap")
	assert.Equal(t, 2, x.Table.Len())
	assert.Equal(t, 2, total)

	var y Runs
	total = 9
	assert.True(t, y.Restore(&rec, 10, 10, 64, &total), "total cap")
	assert.Equal(t, 1, y.Table.Len())

	bad := RunsRecord{Runs: map[string]RunRecord{"": {}, strings.Repeat("x", 65): {}, "\xff": {}, "ok": {}}}
	var z Runs
	total = 0
	assert.False(t, z.Restore(&bad, 10, 10, 64, &total))
	assert.Equal(t, 1, z.Table.Len())
	assert.NotNil(t, z.Table.Get("ok", RunHash("ok")))
}

// CompactOrder drops the entries of runs no longer tracked once they
// outnumber the runs tracked, keeping the others in their order.
func TestRunsCompactOrder(t *testing.T) {
	var x Runs
	var keep []*Run
	for i := range 20 {
		id := string(rune('a' + i))
		r := addRun(&x, id, int64(i+1), 0, 0)
		if i%5 == 0 {
			keep = append(keep, r)
			continue
		}
		r.Flags |= RunGone
		x.Table.Remove(r)
	}
	x.CompactOrder()
	assert.Equal(t, keep, x.Order)
	assert.Zero(t, x.OrderHead)
}
