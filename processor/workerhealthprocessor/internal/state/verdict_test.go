package state

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The verdict on its own: a worse state is taken at once, a better one after
// recover_evaluations evaluations in a row computed it (a recovering reason
// says how far it is), and the transitions survive a checkpoint.
func TestVerdict(t *testing.T) {
	v := NewVerdict(1)
	assert.Equal(t, contract.Unknown, v.State)

	bad := []contract.Reason{{Code: CodeCPU}}
	assert.True(t, v.Judged(contract.Degraded, bad, 2, 2), "from unknown: at once")
	assert.Equal(t, contract.Degraded, v.State)
	assert.Equal(t, int64(2), v.Since)
	assert.True(t, v.Judged(contract.Unhealthy, bad, 3, 2), "worse: at once")

	assert.False(t, v.Judged(contract.Healthy, nil, 4, 2), "better: one of two")
	assert.Equal(t, contract.Unhealthy, v.State)
	if assert.Len(t, v.Reasons, 1) {
		assert.Equal(t, CodeRecovering, v.Reasons[0].Code)
		assert.Equal(t, 1.0, v.Reasons[0].Value)
	}
	assert.False(t, v.Judged(contract.Unhealthy, bad, 5, 2), "the same state again resets the count")
	assert.False(t, v.Judged(contract.Healthy, nil, 6, 2))
	assert.True(t, v.Judged(contract.Healthy, nil, 7, 2), "two in a row")
	assert.Equal(t, int64(7), v.Since)
	assert.Empty(t, v.Reasons)

	rec := v.Checkpoint()
	assert.Equal(t, map[string]int64{"degraded": 1, "unhealthy": 1, "healthy": 1}, rec.Transitions)
	back := NewVerdict(8)
	back.Restore(&rec)
	back.Restored(8, contract.Reason{Code: CodeNotReported})
	assert.Equal(t, v.Transitions(), back.Transitions())
	assert.Equal(t, contract.Unknown, back.State, "restored: unknown until evaluated")
	assert.Equal(t, CodeNotReported, back.Reasons[0].Code)
}
