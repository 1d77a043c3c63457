package state

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The CPU rule's state on its own, without a processor around it: a
// saturation episode begins after cpu.samples samples at or over the
// threshold (a share of min(1, limit) cores), holds between the thresholds,
// and ends after cpu.recovery_samples under the recovery one.
func TestCPUState(t *testing.T) {
	r := &CPURule{Enabled: true, SaturationCores: 0.9, Samples: 2, RecoveryCores: 0.7, RecoverySamples: 2}
	c := NewCPU()
	c.Sample(1, 1, r)
	assert.Equal(t, -1.0, c.cores, "no limit known: nothing judged")

	c.SetLimit(0.5) // half a core: saturated from 0.45 cores
	for i, util := range []float64{0.95, 0.95} {
		_, ok := c.Reason(r)
		assert.False(t, ok, "sample %d", i)
		c.Sample(util, int64(10+i), r)
	}
	why, ok := c.Reason(r)
	require.True(t, ok)
	assert.Equal(t, CodeCPU, why.Code)
	assert.InDelta(t, 0.475, why.Value, 1e-9, "0.95 of a 0.5-CPU limit")
	assert.InDelta(t, 0.45, why.Threshold, 1e-9)
	assert.Equal(t, Time(10), why.Since, "from the first sample over")

	c.Sample(0.8, 12, r) // 0.4 cores: between the thresholds, the episode holds
	c.Sample(0.5, 13, r) // 0.25 cores: under recovery, one of two
	_, ok = c.Reason(r)
	assert.True(t, ok)
	c.Sample(0.5, 14, r)
	_, ok = c.Reason(r)
	assert.False(t, ok, "recovered")
	assert.Nil(t, c.ep, "recovered: the episode let go")
	assert.Equal(t, contract.CPU{MainCores: 0.25, LimitCPUs: 0.5}, c.Snapshot())
}

// The episode is held only while there is one: a sample over the threshold
// starts it, a sample back under drops it unless it latched, and the next
// one over counts from one again, as with the counts kept inline.
func TestCPUEpisodeOnlyWhileOne(t *testing.T) {
	r := &CPURule{Enabled: true, SaturationCores: 0.9, Samples: 2, RecoveryCores: 0.7, RecoverySamples: 2}
	c := NewCPU()
	c.SetLimit(2)
	c.Sample(0.2, 1, r) // 0.4 cores
	assert.Nil(t, c.ep, "under the threshold: no episode")
	c.Sample(0.5, 2, r) // 1 core: over
	require.NotNil(t, c.ep)
	c.Sample(0.4, 3, r) // 0.8 cores: between the thresholds, not latched
	assert.Nil(t, c.ep, "not latched and no longer over: dropped")
	c.Sample(0.5, 4, r)
	_, ok := c.Reason(r)
	assert.False(t, ok, "one sample over since the break: counted from one")
	c.Sample(0.5, 5, r)
	why, ok := c.Reason(r)
	require.True(t, ok)
	assert.Equal(t, Time(4), why.Since, "from the first sample over after the break")
	c.Sample(0.4, 6, r)
	assert.NotNil(t, c.ep, "latched: held between the thresholds")
}
