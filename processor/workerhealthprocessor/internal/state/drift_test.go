package state

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The record names the scheduler that last named the worker (by service
// name, so a reordered config keeps it) only when one did; restoring it
// finds that scheduler again, or leaves Sched as it was when that scheduler is
// no longer configured.
func TestDriftCheckpoint(t *testing.T) {
	names := []string{"bullmq", "celery"}
	name := func(i int) string {
		if i < len(names) {
			return names[i]
		}
		return ""
	}
	index := func(n string) int {
		for i, s := range names {
			if s == n {
				return i
			}
		}
		return -1
	}

	assert.Equal(t, DriftRecord{}, (&Drift{Active: -1}).Checkpoint(name), "never named: empty record")

	d := Drift{Active: 3, SchedKnown: true, Sched: 1}
	d.SetNamed([]string{"r"}, nil)
	rec := d.Checkpoint(name)
	assert.Equal(t, DriftRecord{SchedKnown: true, Sched: "celery"}, rec)

	var back Drift
	back.Restore(&rec, index)
	assert.True(t, back.SchedKnown)
	assert.Equal(t, uint8(1), back.Sched)
	assert.Nil(t, back.Missing(), "the drift of the last evaluation is not kept")

	names = []string{"bullmq"}
	var gone Drift
	gone.Restore(&rec, index)
	assert.True(t, gone.SchedKnown)
	assert.Zero(t, gone.Sched, "scheduler no longer configured: Sched left as it was")
}

// The runs in drift by id are kept only while there are some: a worker
// without drift keeps no lists.
func TestDriftNamed(t *testing.T) {
	var d Drift
	m, o := d.NamedScratch()
	assert.Nil(t, m)
	assert.Nil(t, o)
	d.SetNamed(append(m, "a"), o)
	assert.Equal(t, []string{"a"}, d.Missing())
	assert.Nil(t, d.Orphaned())
	m, o = d.NamedScratch()
	assert.Empty(t, m)
	d.SetNamed(m, append(o, "b"))
	assert.Empty(t, d.Missing())
	assert.Equal(t, []string{"b"}, d.Orphaned())
	d.SetNamed(nil, nil)
	assert.Nil(t, d.named, "nothing kept without drift")
}

// The times since when each disagreement lasts are kept only while one is
// set: a worker in none keeps nothing.
func TestDriftTimes(t *testing.T) {
	var d Drift
	assert.Equal(t, DriftTimes{}, d.DriftTimes())
	d.SetDriftTimes(DriftTimes{OverCapSince: 5})
	assert.Equal(t, DriftTimes{OverCapSince: 5}, d.DriftTimes())
	d.SetDriftTimes(DriftTimes{})
	assert.Nil(t, d.times, "nothing kept without a disagreement")
}
