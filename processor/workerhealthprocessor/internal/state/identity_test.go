package state

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// The identity on its own: which sources named a worker and by which id
// attributes, its snapshot, and its checkpoint record by names (the order
// of the id attributes may change between configs).
func TestIdentity(t *testing.T) {
	keys := []string{"worker_name", "cicd.worker.id"}
	x := NewIdentity(1)
	n, _ := x.Sources()
	assert.Zero(t, n)
	x.Seen(OriginTelemetry, 0, 2)
	x.Seen(OriginTree, 1, 3)
	x.Seen(OriginTree, mapping.NoKey, 4)
	n, last := x.Sources()
	assert.Equal(t, 2, n)
	assert.Equal(t, OriginTelemetry, last)
	assert.True(t, x.NamedBy(OriginTree))
	assert.False(t, x.NamedBy(OriginScheduler))
	prefixes := NewIDPrefixes(keys)
	assert.Equal(t, []string{"worker_name=w1"}, x.IDs(OriginTelemetry, "w1", prefixes).List())
	assert.Equal(t, []string{"(no id attribute)=w1"}, x.IDs(OriginScheduler, "w1", prefixes).List())

	snap := x.Snapshot("w1", prefixes)
	assert.True(t, snap.Tree().Seen)
	assert.Equal(t, contract.Time(4), snap.Tree().LastSeen)
	assert.Equal(t, []string{"cicd.worker.id=w1"}, snap.Tree().IDs.List())
	assert.Equal(t, []string{"worker_name=w1"}, snap.Telemetry().IDs.List())
	assert.Equal(t, contract.Source{}, snap.Scheduler())
	assert.Equal(t, []string{}, snap.Scheduler().IDs.List())
	// A source named by none of the attributes: as IDs says.
	none := NewIdentity(1)
	none.Seen(OriginScheduler, mapping.NoKey, 2)
	assert.Equal(t, []string{"(no id attribute)=w2"}, none.Snapshot("w2", prefixes).Scheduler().IDs.List())
	// Workers named alike share their prefixes.
	alike := NewIdentity(1)
	alike.Seen(OriginTree, 1, 3)
	assert.Equal(t, []string{"cicd.worker.id=w3"}, alike.Snapshot("w3", prefixes).Tree().IDs.List())

	x.Name = "one"
	rec := x.Checkpoint(keys)
	assert.Equal(t, []string{"cicd.worker.id"}, rec.Sources["tree"].Keys)
	back := NewIdentity(9)
	other := []string{"cicd.worker.id", "worker_name"} // the id attributes in another order
	back.Restore(&rec, other, 9)
	assert.Equal(t, "one", back.Name)
	assert.Equal(t, int64(1), back.FirstMention)
	assert.Equal(t, int64(9), back.RestoredAt)
	assert.Equal(t, []string{"worker_name=w1"}, back.IDs(OriginTelemetry, "w1", NewIDPrefixes(other)).List(), "by name, not by bit")
	assert.False(t, back.Unjoined())
	back.ReportUnjoined()
	assert.True(t, back.Unjoined())
}
