package history

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/collector/extension/xextension/storage"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/fleettest"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// Only what changed is written: one new sample is one group and the
// header, not the whole ring.
func TestHistorySavesOnlyWhatChanged(t *testing.T) {
	hs := New(30*time.Minute, 10*time.Second)
	p := &historyPersistence{ids: map[string]int{}, removed: map[string]int{}, rewrite: true}
	hs.persist = p
	for i := range 3 {
		w := fleettest.Worker("w"+string(rune('a'+i)), contract.Healthy)
		for step := range 100 {
			hs.record(&w, fleettest.T0.Add(time.Duration(step)*10*time.Second).UnixMilli())
		}
	}
	first := hs.collect(p)
	// 3 workers x (13 groups + header + transitions) + meta + ids.
	assert.Len(t, first, 3*(13+2)+2)
	assert.Empty(t, hs.collect(p), "nothing changed")

	w := fleettest.Worker("wa", contract.Healthy)
	hs.record(&w, fleettest.T0.Add(100*10*time.Second).UnixMilli())
	ops := hs.collect(p)
	keys := make([]string, 0, len(ops))
	for _, o := range ops {
		keys = append(keys, o.Key)
	}
	assert.ElementsMatch(t, []string{groupKey(12, "wa"), headerKey("wa")}, keys)

	// A worker that leaves: its keys go, and the list of ids changes.
	hs.gen++
	hs.byID["wa"].gen, hs.byID["wb"].gen = hs.gen, hs.gen // served: wc is not
	hs.retain(0)
	ops = hs.collect(p)
	var deleted []string
	for _, o := range ops {
		if o.Type == storage.Delete {
			deleted = append(deleted, o.Key)
		}
	}
	assert.Len(t, deleted, 2+13, "header, transitions and 13 groups of wc")
	assert.Equal(t, keyHistoryIDs, ops[len(ops)-1].Key)
}
