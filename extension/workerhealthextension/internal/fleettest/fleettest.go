// Package fleettest builds the workers and snapshots the extension's tests
// publish, shared by the extension's packages. Test code only.
package fleettest // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/fleettest"

import (
	"fmt"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/internal/contract"
)

var (
	// Source is the processor the snapshots come from.
	Source = component.MustNewIDWithName("worker_health", "fleet")
	// T0 is the tests' "now".
	T0 = time.Date(2025, 11, 29, 12, 0, 0, 0, time.UTC)
)

// Worker is a minimal worker in state st.
func Worker(id string, st contract.State) contract.Worker {
	return contract.Worker{
		ID:       id,
		State:    st,
		Reasons:  []contract.Reason{},
		Since:    contract.TimeOf(T0.Add(-5 * time.Minute)),
		LastSeen: contract.TimeOf(T0.Add(-2 * time.Second)),
		Memory:   contract.Memory{RSSBytes: 300 << 20, SoftLimitBytes: 500 << 20},
		Runs:     contract.Runs{Worker: []string{}, Scheduler: []string{}, Capacity: 5},
	}
}

// Snapshot is src's snapshot at time at of workers, pending not reported.
func Snapshot(src component.ID, at time.Time, workers ...contract.Worker) *contract.Snapshot {
	return &contract.Snapshot{Source: src, Time: at, Workers: workers, Fleet: contract.Fleet{Pending: -1}}
}

// RealisticFleet is n workers in the proportions a real fleet shows, with
// reasons, memory, runs and drift that match their states. Ids are sorted.
func RealisticFleet(n int, at time.Time) *contract.Snapshot {
	ws := make([]contract.Worker, 0, n)
	for i := range n {
		id := fmt.Sprintf("openfn-worker-%05d", i)
		w := Worker(id, contract.Healthy)
		w.Name = fmt.Sprintf("ws-worker-%d.pool-%c", i, 'a'+rune(i%3))
		w.Since = contract.TimeOf(at.Add(-time.Duration(i%97+3) * time.Minute))
		w.LastSeen = contract.TimeOf(at.Add(-time.Duration(i%9+1) * time.Second))
		w.Memory.RSSBytes = int64(120+i*53%270) << 20
		runs := i % 4
		for r := range runs {
			w.Runs.Worker = append(w.Runs.Worker, fmt.Sprintf("run-%d-%d", i, r))
			w.Runs.Scheduler = append(w.Runs.Scheduler, fmt.Sprintf("run-%d-%d", i, r))
		}
		switch p := i * 37 % 100; { // a permutation of 0..99: small fleets get every state too
		case p < 85:
		case p < 91:
			w.State = contract.Degraded
			w.Memory.RSSBytes = 430 << 20
			w.Reasons = []contract.Reason{{
				Code: "memory_near_soft_limit", Message: "tree memory above 80% of the soft limit",
				Value: float64(w.Memory.RSSBytes), Threshold: float64(w.Memory.SoftLimitBytes) * 0.8, Since: at.Add(-3 * time.Minute),
			}}
		case p < 95:
			w.State = contract.Unhealthy
			w.Memory.RSSBytes = 612 << 20
			w.Memory.OverSamples = 4
			w.Reasons = []contract.Reason{{
				Code: "memory_over_soft_limit", Message: "tree memory over the soft limit for 4 samples",
				Value: float64(w.Memory.RSSBytes), Threshold: float64(w.Memory.SoftLimitBytes), Since: at.Add(-2 * time.Minute),
			}}
		case p < 97:
			w.State = contract.Stalled
			w.Runs.Worker = []string{}
			w.Drift = contract.NewDrift(contract.DriftDetail{Missing: []string{fmt.Sprintf("run-%d-lost", i)}})
			w.Runs.Scheduler = w.Drift.Missing()
			w.Reasons = []contract.Reason{{
				Code: "no_claim", Message: "work pending, nothing claimed for 10m",
				Value: 600, Threshold: 300, Since: at.Add(-10 * time.Minute),
			}}
		case p < 98:
			w.State = contract.Lost
			w.LastSeen = contract.TimeOf(at.Add(-7 * time.Minute))
			w.Reasons = []contract.Reason{{
				Code: "no_telemetry", Message: "no telemetry and no process for 5m",
				Value: 420, Threshold: 300, Since: at.Add(-7 * time.Minute),
			}}
		default:
			w.State = contract.Unknown
			w.LastSeen = 0
		}
		ws = append(ws, w)
	}
	s := Snapshot(Source, at, ws...)
	s.Fleet = contract.Fleet{Pending: 12, IdleCapacity: int64(n)}
	return s
}
