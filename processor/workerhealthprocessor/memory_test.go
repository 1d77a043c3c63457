package workerhealthprocessor

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/workerwatch/workerwatch/internal/contract"
)

func TestRoleMemory(t *testing.T) {
	roles := func(c *Config) {
		c.Memory.SoftLimitBytes = 0
		c.Memory.Roles = map[string]RoleMemoryRule{"main": {SoftLimitBytes: 600}}
	}
	tr := func(main, child int64) tree {
		return tree{worker: "w1", roles: map[string]int64{"main": main, "child": child}, present: 1, oom: -1}
	}
	runSteps(t, []stepCase{
		{
			// Before: only the tree had a limit.
			name: "the main role over its own limit: degraded, unhealthy after 3 samples, with the role named",
			cfg:  roles,
			steps: seq(
				step{do: feed(hb, tr(700, 100)), advance: sec, want: degraded, code: codeMemory},
				step{do: feed(hb, tr(700, 100)), advance: sec, want: degraded},
				step{do: feed(hb, tr(700, 100)), advance: sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(codeMemory)
					assert.Equal(h.t, "main", r.Role)
					assert.InDelta(h.t, 700, r.Value, 0)
					assert.InDelta(h.t, 600, r.Threshold, 0)
					m := h.snap("w1").Memory
					assert.Equal(h.t, []contract.RoleMemory{
						{Role: "child", RSSBytes: 100},
						{Role: "main", RSSBytes: 700, SoftLimitBytes: 600, OverSamples: 3},
					}, m.Roles)
					assert.Equal(h.t, int64(800), m.RSSBytes)
				}},
				repeat(3, step{do: feed(hb, tr(100, 100)), advance: sec}),
				step{do: feed(hb, tr(100, 100)), advance: sec, want: healthy},
			),
		},
		{
			name:  "big children with no tree limit leave the worker healthy",
			cfg:   roles,
			steps: seq(repeat(5, step{do: feed(hb, tr(100, 5000)), advance: sec, want: healthy})),
		},
		{
			name: "the main role over its limit when a run starts: unhealthy at once",
			cfg:  roles,
			steps: seq(
				step{do: feed(hb, tr(700, 0)), advance: sec, want: degraded},
				step{do: feed(wl("w1", "workerwatch.run.started", "r1", nil)), advance: sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(codeMemoryAtStart)
					assert.Equal(h.t, "main", r.Role)
				}},
			),
		},
		{
			// Before: with 25 samples over the limit only the at-run-start
			// reason was listed.
			name: "every active reason is listed: persistently over and over at a run's start",
			steps: seq(
				step{do: mem(1200), advance: sec, want: degraded},
				step{do: func(h *harness) { h.logs(wl("w1", "workerwatch.run.started", "r1", nil)) }, advance: sec, want: unhealthy},
				repeat(25, step{do: mem(1200), advance: sec}),
				step{want: unhealthy, code: codeMemory, check: func(h *harness) {
					assert.Contains(h.t, h.codes("w1"), codeMemoryAtStart)
				}},
			),
		},
	})
}

// The memory rule's state on its own: the soft limit is the lower of
// soft_limit_bytes and soft_limit_ratio of the cgroup limit; memory over it
// degrades at once and is unhealthy after unhealthy_samples samples or
// unhealthy_after (tick, between samples); recovery_samples samples under
// recovery_ratio of the limit end the episode.
func TestMemState(t *testing.T) {
	cfg := &MemoryRule{SoftLimitBytes: 1000, SoftLimitRatio: 0.5, UnhealthySamples: 3, UnhealthyAfter: 10, RecoveryRatio: 0.9, RecoverySamples: 2, AtRunStart: true}
	r := &memRules{cfg: cfg, lostAfter: 100}
	m := memState{rss: -1, cgroupMax: -1}
	assert.Equal(t, int64(1000), m.softLimit(r), "no cgroup limit: the bytes")
	m.cgroupMax = 1200
	assert.Equal(t, int64(600), m.softLimit(r), "half the cgroup's 1200 is lower")

	sample := func(rss, now int64) {
		m.rss, m.rssAt = rss, now
		m.mem.sample(rss, m.softLimit(r), now, cfg)
	}
	codes := func() (u, d []string) {
		unhealthy, degraded := m.addReasons(r, nil, nil)
		for _, x := range unhealthy {
			u = append(u, x.Code)
		}
		for _, x := range degraded {
			d = append(d, x.Code)
		}
		return u, d
	}
	sample(700, 1)
	u, d := codes()
	assert.Empty(t, u)
	assert.Equal(t, []string{codeMemory}, d, "over the limit: degraded at once")

	m.tick(11, r) // over for unhealthy_after without a new sample
	u, d = codes()
	assert.Equal(t, []string{codeMemory}, u, "persistent: unhealthy")
	assert.Empty(t, d)

	sample(560, 12) // under the limit, over 0.9 of it: the episode holds
	u, _ = codes()
	assert.Equal(t, []string{codeMemory}, u)
	sample(100, 13)
	sample(100, 14)
	u, d = codes()
	assert.Empty(t, u, "recovered after recovery_samples")
	assert.Empty(t, d)

	m.runStarted(15, r) // under the limit: nothing
	sample(700, 16)
	m.runStarted(17, r)
	u, _ = codes()
	assert.Equal(t, []string{codeMemoryAtStart}, u, "over the limit when a run started")
	snap := m.snapshot(r)
	assert.Equal(t, int64(700), snap.RSSBytes)
	assert.Equal(t, int64(600), snap.SoftLimitBytes)
	assert.Equal(t, 1, snap.OverSamples)
}
