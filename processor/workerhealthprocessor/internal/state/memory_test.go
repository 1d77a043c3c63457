package state

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// The memory rule's state on its own: the soft limit is the lower of
// soft_limit_bytes and soft_limit_ratio of the cgroup limit; memory over it
// degrades at once and is unhealthy after unhealthy_samples samples or
// unhealthy_after (tick, between samples); recovery_samples samples under
// recovery_ratio of the limit end the episode.
func TestMemState(t *testing.T) {
	cfg := &MemoryRule{SoftLimitBytes: 1000, SoftLimitRatio: 0.5, UnhealthySamples: 3, UnhealthyAfter: 10, RecoveryRatio: 0.9, RecoverySamples: 2, AtRunStart: true}
	r := &MemRules{cfg: cfg, lostAfter: 100}
	m := NewMemory()
	assert.Equal(t, int64(1000), m.SoftLimit(r), "no cgroup limit: the bytes")
	m.cgroupMax = 1200
	assert.Equal(t, int64(600), m.SoftLimit(r), "half the cgroup's 1200 is lower")

	sample := func(rss, now int64) {
		m.Sample(&mapping.Sample{Mem: rss}, now, r)
	}
	codes := func() (u, d []string) {
		unhealthy, degraded := m.AddReasons(r, nil, nil)
		for _, x := range unhealthy {
			u = append(u, x.Code)
		}
		for _, x := range degraded {
			d = append(d, x.Code)
		}
		return u, d
	}
	sample(500, 0)
	assert.Nil(t, m.mem, "under the limit: no episode held")
	sample(700, 1)
	u, d := codes()
	assert.Empty(t, u)
	assert.Equal(t, []string{CodeMemory}, d, "over the limit: degraded at once")

	m.Tick(11, r) // over for unhealthy_after without a new sample
	u, d = codes()
	assert.Equal(t, []string{CodeMemory}, u, "persistent: unhealthy")
	assert.Empty(t, d)

	sample(560, 12) // under the limit, over 0.9 of it: the episode holds
	u, _ = codes()
	assert.Equal(t, []string{CodeMemory}, u)
	sample(100, 13)
	sample(100, 14)
	u, d = codes()
	assert.Empty(t, u, "recovered after recovery_samples")
	assert.Empty(t, d)
	assert.Nil(t, m.mem, "recovered: the episode let go")

	m.RunStarted(15, r) // under the limit: nothing
	sample(700, 16)
	m.RunStarted(17, r)
	u, _ = codes()
	assert.Equal(t, []string{CodeMemoryAtStart}, u, "over the limit when a run started")
	snap := m.Snapshot(r)
	assert.Equal(t, int64(700), snap.RSSBytes)
	assert.Equal(t, int64(600), snap.SoftLimitBytes)
	assert.Equal(t, 1, snap.OverSamples)
}
