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
	d, _, bad := driftText(contract.NewDrift(contract.DriftDetail{Orphaned: []string{"x"}, OverCapacity: 2}))
	assert.Equal(t, "orphaned 1 · over capacity 2", d)
	assert.True(t, bad)
}

// TestEvidence: a reason shows the figures that fired it; a latched one
// says so, with the value now and its way back; a process exit says how.
func TestEvidence(t *testing.T) {
	now := 148.0 * (1 << 20)
	assert.Empty(t, evidence(contract.Reason{Code: contract.CodeNotReported}))
	assert.Equal(t, "2 / 1", evidence(contract.Reason{Code: contract.CodeMissing, Value: 2, Threshold: 1}))
	assert.Equal(t, "310 MiB / 300 MiB · 3 samples", evidence(contract.Reason{
		Code: contract.CodeMemory, Value: 310 << 20, Threshold: 300 << 20, Samples: 3,
	}))
	assert.Equal(t, "fired at 310 MiB / 300 MiB · 3 samples · latched · now 148 MiB · recovering: 2 of 3 samples under 95 %",
		evidence(contract.Reason{
			Code: contract.CodeMemory, Value: 310 << 20, Threshold: 300 << 20, Samples: 3,
			Latched: true, Current: &now, Recovery: &contract.Recovery{Samples: 2, Needed: 3, Ratio: 0.95},
		}))
	sig, code := 9, 3
	assert.Equal(t, "signal 9", evidence(contract.Reason{Code: contract.CodeProcessExited, Exit: &contract.Exit{How: contract.ExitSignal, Signal: &sig}}))
	assert.Equal(t, "exit code 3", evidence(contract.Reason{Code: contract.CodeProcessExited, Exit: &contract.Exit{How: contract.ExitCode, Code: &code}}))
	assert.Equal(t, "exit unknown", evidence(contract.Reason{Code: contract.CodeProcessExited, Exit: &contract.Exit{How: contract.ExitUnknown}}))

	t0 := fleettest.T0
	assert.Equal(t, "not known yet", incarnationText(nil, t0))
	assert.Equal(t, "pid 4242, started 2025-11-29 11:55:00 UTC (5m ago) · from the process tree", incarnationText(&contract.Incarnation{
		ID: "4242@2026-01-01T00:00:00.000Z", Source: contract.IncarnationTree, PID: 4242, Started: contract.TimeOf(t0.Add(-5 * time.Minute)),
	}, t0))
	assert.Equal(t, "service.instance.id abc, first seen 1m ago · from the worker's telemetry", incarnationText(&contract.Incarnation{
		ID: "abc", Source: contract.IncarnationServiceInstance, FirstSeen: contract.TimeOf(t0.Add(-time.Minute)),
	}, t0))
	assert.Equal(t, "signal 9 (41@x), 2s ago", lastExitText(&contract.Exit{How: contract.ExitSignal, Signal: &sig, Incarnation: "41@x", At: t0.Add(-2 * time.Second)}, t0))
}
