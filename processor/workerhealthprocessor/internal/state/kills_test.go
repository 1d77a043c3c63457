package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
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
	var k Kills
	minute := int64(time.Minute)

	k.count(killReasonIndex[contract.KillTimeout], 0, r, &effects) // effect none
	k.count(killReasonIndex[contract.KillOOM], 1, r, &effects)
	k.window(2, r, &effects)
	_, effect := k.reason(r)
	assert.Equal(t, EffectNone, effect, "one kill that counts")

	k.count(killReasonIndex[contract.KillCrash], 3, r, &effects)
	k.window(4, r, &effects)
	why, effect := k.reason(r)
	assert.Equal(t, EffectDegraded, effect, "two that count, one unhealthy")
	assert.Equal(t, 2.0, why.Value)
	assert.Equal(t, Time(1), why.Since)

	k.count(killReasonIndex[contract.KillOOM], 5, r, &effects)
	k.window(6, r, &effects)
	_, effect = k.reason(r)
	assert.Equal(t, EffectUnhealthy, effect, "two unhealthy ones")

	k.window(1+minute+1, r, &effects) // the first oom slid out
	_, effect = k.reason(r)
	assert.Equal(t, EffectDegraded, effect)
	k.window(5+minute+1, r, &effects)
	_, effect = k.reason(r)
	assert.Equal(t, EffectNone, effect, "all slid out")
	assert.Equal(t, map[string]int64{contract.KillTimeout: 1, contract.KillOOM: 2, contract.KillCrash: 1}, k.Snapshot(),
		"the cumulative counts keep every kill")
}
