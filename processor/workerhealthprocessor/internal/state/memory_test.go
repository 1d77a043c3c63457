package state

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
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
	snap := m.Snapshot(r, nil)
	assert.Equal(t, int64(700), snap.RSSBytes)
	assert.Equal(t, int64(600), snap.SoftLimitBytes)
	assert.Equal(t, 1, snap.OverSamples)
}

// A snapshot lists the roles in the memory it is given (the processor's
// block for the snapshot), capped at their number; given none, in a list
// of their own; [] (not null) when there is none.
func TestMemSnapshotRolesInto(t *testing.T) {
	cfg := &MemoryRule{RecoveryRatio: 0.9, RecoverySamples: 2, UnhealthySamples: 3}
	r := NewMemRules(cfg, 100)
	m := NewMemory()
	assert.Equal(t, 0, m.RoleCount())
	assert.NotNil(t, m.Snapshot(r, nil).Roles, "no role: [] in the JSON")
	assert.Empty(t, m.Snapshot(r, nil).Roles)
	sample := func(main, child int64, now int64) {
		s := mapping.Sample{Mem: main + child, NRole: 2}
		s.Roles[0] = mapping.RoleVal{Role: contract.RoleMain, RSS: main}
		s.Roles[1] = mapping.RoleVal{Role: "child", RSS: child}
		m.Sample(&s, now, r)
	}
	sample(100, 50, 1)
	want := []contract.RoleMemory{{Role: "child", RSSBytes: 50}, {Role: contract.RoleMain, RSSBytes: 100}}
	assert.Equal(t, 2, m.RoleCount())
	assert.Equal(t, want, m.Snapshot(r, nil).Roles)

	block := make([]contract.RoleMemory, 3)
	got := m.Snapshot(r, block[:2]).Roles
	assert.Equal(t, want, got)
	assert.Same(t, &block[0], &got[0], "in the memory given")
	assert.Equal(t, 2, cap(got), "capped: an append does not write into the block's next piece")

	sample(120, 50, 3)
	moved := m.Snapshot(r, block[:1]).Roles
	assert.NotSame(t, &block[0], &moved[0], "too little given: a list of its own")
	assert.Equal(t, int64(120), moved[1].RSSBytes)
	assert.Equal(t, int64(100), got[1].RSSBytes, "what was published stays as it was")
}
