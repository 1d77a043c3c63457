package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// The kills rule's state on its own: kills.count counted kills within
// kills.window make the worker unhealthy (reasons whose effect is
// unhealthy) or degraded (any that count); a reason with effect none is
// counted by reason but never judged; the window forgets old kills.
func TestKillState(t *testing.T) {
	r := &KillsRule{Count: 2, Window: time.Minute}
	var effects [NKillReasons]uint8
	effects[killReasonIndex[contract.KillOOM]] = EffectUnhealthy
	effects[killReasonIndex[contract.KillCrash]] = EffectDegraded
	rules := &KillRules{cfg: r, effects: effects}
	var k Kills
	minute := int64(time.Minute)

	k.Kill(killReasonIndex[contract.KillTimeout], 0, rules) // effect none
	k.Kill(killReasonIndex[contract.KillOOM], 1, rules)
	k.Window(2, rules)
	_, effect := k.Reason(rules)
	assert.Equal(t, EffectNone, effect, "one kill that counts")

	k.Kill(killReasonIndex[contract.KillCrash], 3, rules)
	k.Window(4, rules)
	why, effect := k.Reason(rules)
	assert.Equal(t, EffectDegraded, effect, "two that count, one unhealthy")
	assert.Equal(t, 2.0, why.Value)
	assert.Equal(t, Time(1), why.Since)

	k.Kill(killReasonIndex[contract.KillOOM], 5, rules)
	k.Window(6, rules)
	_, effect = k.Reason(rules)
	assert.Equal(t, EffectUnhealthy, effect, "two unhealthy ones")

	k.Window(1+minute+1, rules) // the first oom slid out
	_, effect = k.Reason(rules)
	assert.Equal(t, EffectDegraded, effect)
	k.Window(5+minute+1, rules)
	_, effect = k.Reason(rules)
	assert.Equal(t, EffectNone, effect, "all slid out")
	assert.Equal(t, map[string]int64{contract.KillTimeout: 1, contract.KillOOM: 2, contract.KillCrash: 1}, k.Snapshot(),
		"the cumulative counts keep every kill")
}

// The book is kept only while there is something in it: a worker whose
// tree reports no kill and no child exit keeps nothing, and one whose
// window forgot its kills keeps only their cumulative counts.
func TestKillBook(t *testing.T) {
	r := &KillsRule{Count: 1, Window: time.Minute, ExitWindow: time.Second}
	rules := NewKillRules(r)
	k := NewKills()
	sec := int64(time.Second)
	k.Tree(&mapping.Sample{Tree: true, OOMKills: 0, ExitMain: 0, ExitChild: 0}, 0, rules)
	assert.Nil(t, k.book, "baselines only")

	k.RunEnded(sec)
	k.Tree(&mapping.Sample{Tree: true, OOMKills: 0, ExitMain: 0, ExitChild: 1}, 2*sec, rules)
	assert.NotNil(t, k.book, "a child exit waits")
	k.MatchExits(4*sec, rules, nil)
	assert.Nil(t, k.book, "the run end explained it")

	k.Kill(killReasonIndex[contract.KillOOM], 5*sec, rules)
	k.Window(6*sec, rules)
	assert.NotNil(t, k.book)
	k.Window(5*sec+int64(time.Minute)+1, rules)
	require.NotNil(t, k.book, "the counts stay")
	assert.Equal(t, killBook{kills: k.book.kills}, *k.book, "the window forgot the kill: only the counts are left")
	assert.Equal(t, map[string]int64{contract.KillOOM: 1}, k.Snapshot())
}
