package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// The recycle rule on its own: pool children that exit right after their
// run ends (excused by the kills rule) are recycles; recycle.min_exits of
// them within recycle.window, for at least per_run_ratio of the runs that
// ended, is a loop (pool_recycle_loop). Exits no run explains are kills,
// not recycles; runs that keep their child dilute the ratio; the window
// forgets.
func TestRecycleLoop(t *testing.T) {
	sec := int64(time.Second)
	kr := NewKillRules(&KillsRule{Count: 3, Window: 10 * time.Minute, ExitWindow: 15 * time.Second})
	c := &RecycleRule{Window: 10 * time.Minute, MinExits: 3, PerRunRatio: 0.9}
	require.NoError(t, c.Validate())
	k, r := NewKills(), Recycle{}
	exits := int64(0)
	tree := func(now int64, n int64) {
		exits += n
		k.Tree(&mapping.Sample{Tree: true, ExitMain: 0, ExitChild: exits, OOMKills: -1}, now, kr)
	}
	step := func(now int64) (contract.Reason, bool) {
		r.MatchExits(&k, now, kr, c)
		r.Window(now, c)
		return r.Reason(c)
	}
	tree(0, 0) // the baseline

	// A run ends on a worker whose tree reports no exits yet: not counted.
	var bare Recycle
	bare.RunEnded(&Kills{exitChildBase: -1}, 0, false, c)
	assert.Empty(t, bare.lists().ends)

	// Two runs, each followed by its child's exit: two recycles, below
	// min_exits.
	for i := int64(1); i <= 2; i++ {
		k.RunEnded(i * 10 * sec)
		r.RunEnded(&k, i*10*sec, false, c)
		tree(i*10*sec+sec, 1)
	}
	_, firing := step(60 * sec)
	assert.False(t, firing, "2 recycles < min_exits 3")
	assert.Equal(t, 2, r.recycles())
	assert.Equal(t, int64(0), k.ByReason()[KillIndex(contract.KillChildExit)], "excused exits are no kills")

	// A child exit with no run end: a child_exit kill, no recycle.
	tree(70*sec, 1)
	_, firing = step(100 * sec)
	assert.False(t, firing)
	assert.Equal(t, 2, r.recycles())
	assert.Equal(t, int64(1), k.ByReason()[KillIndex(contract.KillChildExit)])

	// A killed run whose child died with it: a kill, no recycle.
	k.RunEnded(75 * sec)
	r.RunEnded(&k, 75*sec, true, c)
	tree(76*sec, 1)
	_, firing = step(100 * sec)
	assert.False(t, firing)
	assert.Equal(t, 2, r.recycles())

	// A third run with its recycle: 3 recycles for 3 runs ended.
	k.RunEnded(110 * sec)
	r.RunEnded(&k, 110*sec, false, c)
	tree(111*sec, 1)
	why, firing := step(130 * sec)
	require.True(t, firing)
	assert.Equal(t, CodeRecycleLoop, why.Code)
	assert.Equal(t, 3.0, why.Value)
	assert.Equal(t, 3.0, why.Threshold)
	assert.Equal(t, Time(11*sec), why.Since, "since the oldest recycle in the window")
	assert.Contains(t, why.Message, "3 pool children replaced after their run within 10m0s, for 3 runs ended")

	// Runs that keep their child: 3 recycles for 4 runs is under 0.9.
	r.RunEnded(&k, 140*sec, false, c)
	k.RunEnded(140 * sec)
	_, firing = step(141 * sec)
	assert.False(t, firing, "3 of 4 runs recycled < 0.9")
	assert.Equal(t, int64(0), r.lists().since)

	// The window forgets: 10 minutes later nothing is left.
	_, firing = step(141*sec + int64(10*time.Minute))
	assert.False(t, firing)
	assert.Empty(t, r.lists().exits)
	assert.Empty(t, r.lists().ends)

	assert.Nil(t, r.l, "nothing kept once the window forgot it all")

	// Off: window 0 keeps nothing.
	r.RunEnded(&k, 1000*sec, false, c)
	require.NotNil(t, r.l)
	r.Window(1000*sec, &RecycleRule{})
	assert.Nil(t, r.l)
	r.RunEnded(&k, 1001*sec, false, &RecycleRule{})
	assert.Nil(t, r.l, "a run end with the rule off keeps nothing")
}

// Exits that settle in one evaluation are told apart: the one a run end
// explained is the recycle, logged at its own time (not at the time of the
// unexplained exit settled with it), so the window forgets it when due.
func TestRecycleAtItsExitsTime(t *testing.T) {
	sec := int64(time.Second)
	kr := NewKillRules(&KillsRule{Count: 3, Window: 10 * time.Minute, ExitWindow: 15 * time.Second})
	c := &RecycleRule{Window: 10 * time.Minute, MinExits: 3, PerRunRatio: 0.9}
	k, r := NewKills(), Recycle{}
	k.Tree(&mapping.Sample{Tree: true, ExitChild: 0, OOMKills: -1}, 0, kr)
	k.RunEnded(10 * sec)
	r.RunEnded(&k, 10*sec, false, c)
	k.Tree(&mapping.Sample{Tree: true, ExitChild: 1, OOMKills: -1}, 11*sec, kr)  // explained by the run end
	k.Tree(&mapping.Sample{Tree: true, ExitChild: 2, OOMKills: -1}, 100*sec, kr) // no run end near it
	r.MatchExits(&k, 200*sec, kr, c)
	assert.Equal(t, []int64{11 * sec}, r.lists().exits)
	assert.Equal(t, int64(1), k.ByReason()[KillIndex(contract.KillChildExit)])
}

func TestRecycleRuleValidate(t *testing.T) {
	d := DefaultRecycleRule()
	require.NoError(t, d.Validate())
	assert.Equal(t, time.Duration(0), d.Window, "off by default")
	d.Window = 10 * time.Minute
	require.NoError(t, d.Validate(), "a window alone turns it on")
	off := RecycleRule{}
	require.NoError(t, off.Validate(), "window 0 is off; the rest is not read")
	for _, tc := range []struct {
		rule RecycleRule
		key  string
	}{
		{RecycleRule{Window: -time.Second, MinExits: 5, PerRunRatio: 0.9}, "recycle.window"},
		{RecycleRule{Window: time.Minute, MinExits: 0, PerRunRatio: 0.9}, "recycle.min_exits"},
		{RecycleRule{Window: time.Minute, MinExits: 5, PerRunRatio: 0}, "recycle.per_run_ratio"},
		{RecycleRule{Window: time.Minute, MinExits: 5, PerRunRatio: 1.5}, "recycle.per_run_ratio"},
	} {
		err := tc.rule.Validate()
		require.Error(t, err, "%+v", tc.rule)
		assert.Contains(t, err.Error(), tc.key)
	}
}

// lists are the recycle's lists (empty when none are kept).
func (r *Recycle) lists() recycleLog {
	if r.l == nil {
		return recycleLog{}
	}
	return *r.l
}
