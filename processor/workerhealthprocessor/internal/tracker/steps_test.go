package tracker

import (
	"cmp"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// openfnLike: a worker named by worker_name on its records, its tree by
// cicd.worker.id (the receiver's), as with OpenFn.
func openfnLike(c *testConfig) { c.Mapping.WorkerIDAttributes = []string{"worker_name"} }

// named are a worker's own records naming it by worker_name on the resource.
func named(id string, recs ...rec) plog.Logs {
	ld := workerLogs("ws-worker", recs...)
	for i := 0; i < ld.ResourceLogs().Len(); i++ {
		a := ld.ResourceLogs().At(i).Resource().Attributes()
		a.Remove("cicd.worker.id")
		a.PutStr("worker_name", id)
	}
	return ld
}

func feed(fs ...any) func(*harness) {
	return func(h *harness) {
		for _, f := range fs {
			switch x := f.(type) {
			case plog.Logs:
				h.logs(x)
			case pmetric.Metrics:
				h.metrics(x)
			case tree:
				h.metrics(x.Metrics())
			case func(*harness):
				x(h)
			}
		}
	}
}

const (
	unknown   = contract.Unknown
	healthy   = contract.Healthy
	degraded  = contract.Degraded
	unhealthy = contract.Unhealthy
	stalled   = contract.Stalled
	lost      = contract.Lost
)

// step: feed input, let time pass, evaluate, check the state and reasons.
type step struct {
	do      func(h *harness)
	advance time.Duration
	want    contract.State
	code    string // a reason code that must be present ("" = none checked)
	noCode  string // a reason code that must be absent
	// check runs last, for anything else the step asserts.
	check func(h *harness)
	// id is the worker the step checks ("" = w1).
	id string
}

// stepCase is one step-table case.
type stepCase struct {
	name  string
	cfg   func(*testConfig)
	steps []step
	// maxTransitions bounds how often the state may change (flapping).
	maxTransitions int
}

// runSteps runs step-table cases: each step feeds its input, lets time pass,
// evaluates and checks.
func runSteps(t *testing.T, tests []stepCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testCfg()
			if tt.cfg != nil {
				tt.cfg(cfg)
			}
			h := newHarness(t, cfg)
			transitions := 0
			for i, s := range tt.steps {
				if s.do != nil {
					s.do(h)
				}
				h.advance(s.advance)
				transitions += len(h.eval())
				id := cmp.Or(s.id, "w1")
				if s.want != "" {
					require.Equal(t, s.want, h.state(id), "step %d: reasons %v", i, h.codes(id))
				}
				if s.code != "" {
					assert.Contains(t, h.codes(id), s.code, "step %d", i)
				}
				if s.noCode != "" {
					assert.NotContains(t, h.codes(id), s.noCode, "step %d", i)
				}
				if s.check != nil {
					s.check(h)
				}
			}
			if tt.maxTransitions > 0 {
				assert.LessOrEqual(t, transitions, tt.maxTransitions, "the state flapped")
			}
		})
	}
}

func hb(h *harness) { h.logs(wl("w1", "workerwatch.worker.heartbeat", "", nil)) }

func mem(n int64) func(*harness) {
	return func(h *harness) { h.metrics(treeMetrics("w1", n, -1, 1)) }
}

func cpu(fraction float64) func(*harness) {
	return func(h *harness) { h.metrics(treeMetrics("w1", 100, fraction, 1)) }
}

// autoRun numbers runs for steps that need a new run each time.
var autoRun atomic.Int64

func kill(run, reason string) func(*harness) {
	return func(h *harness) {
		id := run
		if id == "" {
			id = fmt.Sprintf("auto-%d", autoRun.Add(1))
		}
		h.logs(wl("w1", "workerwatch.run.claimed", id, nil))
		h.logs(wl("w1", "workerwatch.run.killed", id, map[string]any{"workerwatch.kill.reason": reason, "cicd.pipeline.result": "error"}))
	}
}

func both(fs ...func(*harness)) func(*harness) {
	return func(h *harness) {
		for _, f := range fs {
			f(h)
		}
	}
}

func repeat[T any](n int, s T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func seq(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch x := p.(type) {
		case step:
			out = append(out, x)
		case []step:
			out = append(out, x...)
		case [][]step:
			for _, y := range x {
				out = append(out, y...)
			}
		}
	}
	return out
}
