package pages

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/fleettest"
	"github.com/workerwatch/workerwatch/internal/contract"
)

func TestFormatting(t *testing.T) {
	assert.Equal(t, "512 B", formatBytes(512))
	assert.Equal(t, "1.5 KiB", formatBytes(1536))
	assert.Equal(t, "500 MiB", formatBytes(500<<20))
	assert.Equal(t, "1.2 GiB", formatBytes(1.2*(1<<30)))
	assert.Equal(t, "59s", dur(59*time.Second))
	assert.Equal(t, "2m", dur(150*time.Second))
	assert.Equal(t, "1h 5m", dur(65*time.Minute))
	assert.Equal(t, "2d 3h", dur(51*time.Hour))
	assert.Equal(t, "never", ago(time.Time{}, fleettest.T0))
	pct, cls, txt := memoryText(contract.Memory{RSSBytes: 100 << 20})
	assert.Equal(t, 0, pct)
	assert.Equal(t, "none", cls)
	assert.Equal(t, "100 MiB (no soft limit)", txt)
	pct, cls, _ = memoryText(contract.Memory{RSSBytes: 450 << 20, SoftLimitBytes: 500 << 20})
	assert.Equal(t, 90, pct)
	assert.Equal(t, "warn", cls)
	assert.Equal(t, "worker 1 · scheduler 2 · cap 5", runsText(contract.Runs{Worker: []string{"a"}, Scheduler: []string{"a", "b"}, Capacity: 5}))
	d, _, bad := driftText(contract.Drift{Orphaned: []string{"x"}, OverCapacity: 2})
	assert.Equal(t, "orphaned 1 · over capacity 2", d)
	assert.True(t, bad)
}
