package tracker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// TestReasonEvidence pins, for every reason code, the evidence it carries
// (docs/health-rules.md, "Evidence"): the figures when it fired, on the
// firing side of the threshold, and for a latched reason the value now and
// its recovery. No reason shows a value on the wrong side of its threshold
// unless it is latched.
func TestReasonEvidence(t *testing.T) {
	sec := time.Second
	ptr := func(f float64) *float64 { return &f }
	started := t0.Add(-time.Hour)
	inc := "100@" + started.Format("2006-01-02T15:04:05.000Z07:00")
	liveMem := func(n int64) func(*harness) { return func(h *harness) { h.metrics(live(100, started, n)) } }
	cases := []struct {
		name string
		cfg  func(*testConfig)
		do   func(h *harness)
		want contract.Reason // Message and Since are checked apart
		// since is how long before the evaluation the reason's episode
		// began (since), or -1 to leave it unchecked.
		since time.Duration
	}{
		{
			name: "memory latched, now under the limit",
			do: func(h *harness) {
				for range 3 {
					liveMem(1500)(h)
					h.advance(sec)
				}
				liveMem(900)(h)
			},
			want: contract.Reason{
				Code: contract.CodeMemory, Value: 1500, Threshold: 1000, Samples: 3, FiredAt: t0.Add(2 * sec),
				Latched: true, Current: ptr(900), Recovery: &contract.Recovery{Samples: 1, Needed: 3, Ratio: 0.95}, Incarnation: inc,
			},
			since: 3 * sec,
		},
		{
			name: "memory over, not yet persistent",
			do: func(h *harness) {
				liveMem(1500)(h)
				h.advance(sec)
				liveMem(1600)(h)
			},
			want:  contract.Reason{Code: contract.CodeMemory, Value: 1600, Threshold: 1000, Samples: 2, Incarnation: inc},
			since: sec,
		},
		{
			name: "memory over the limit when a run started",
			do: func(h *harness) {
				liveMem(1200)(h)
				h.logs(wl("w1", "workerwatch.run.started", "r1", nil))
				h.advance(sec)
				liveMem(500)(h)
			},
			want: contract.Reason{
				Code: contract.CodeMemoryAtStart, Value: 1200, Threshold: 1000, FiredAt: t0,
				Latched: true, Current: ptr(500), Recovery: &contract.Recovery{Samples: 1, Needed: 3, Ratio: 0.95}, Incarnation: inc,
			},
			since: sec,
		},
		{
			name: "kills in the window",
			do: func(h *harness) {
				liveMem(100)(h)
				for range 3 {
					kill("", contract.KillCrash)(h)
					h.advance(sec)
				}
			},
			want:  contract.Reason{Code: contract.CodeKills, Value: 3, Threshold: 3, Samples: 3, Incarnation: inc},
			since: 3 * sec,
		},
		{
			name: "CPU saturated, latched, now idle",
			do: func(h *harness) {
				for range 3 {
					cpu(0.25)(h) // a full core of 4 CPUs
					h.advance(sec)
				}
				cpu(0.05)(h)
			},
			want: contract.Reason{
				Code: contract.CodeCPU, Value: 1, Threshold: 0.9, Samples: 3, FiredAt: t0.Add(2 * sec),
				Latched: true, Current: ptr(0.2), Recovery: &contract.Recovery{Samples: 1, Needed: 3, Ratio: 0.7 / 0.9},
			},
			since: 3 * sec,
		},
		{
			name: "no claim",
			cfg:  func(c *testConfig) { c.Stalled.After = 3 * sec; c.Stalled.RequirePending = false },
			do: func(h *harness) {
				for range 4 {
					hb(h)
					h.advance(sec)
				}
			},
			want:  contract.Reason{Code: contract.CodeNoClaim, Value: 4, Threshold: 3},
			since: 4 * sec,
		},
		{
			name: "no telemetry",
			do: func(h *harness) {
				liveMem(100)(h)
				h.eval()
				h.advance(6 * sec)
			},
			want:  contract.Reason{Code: contract.CodeNoTelemetry, Value: 6, Threshold: 5},
			since: 6 * sec,
		},
		{
			name: "the root exited",
			do: func(h *harness) {
				liveMem(100)(h)
				h.eval()
				sig := root{worker: "w1", pid: 100, started: started, mem: -1, present: 0, exitAt: h.clock.Now(), code: -1, signal: 9}
				h.metrics(sig.metrics())
				h.advance(3 * sec)
			},
			want:  contract.Reason{Code: contract.CodeProcessExited, Value: 3, Threshold: 2, Incarnation: inc},
			since: 3 * sec,
		},
		{
			name: "runs missing",
			do: func(h *harness) {
				hb(h)
				h.logs(sl("w1", "workerwatch.run.claimed", "r1"))
				h.advance(4 * sec)
				hb(h)
			},
			want:  contract.Reason{Code: contract.CodeMissing, Value: 1, Threshold: 1},
			since: -1,
		},
		{
			name: "over capacity",
			cfg:  func(c *testConfig) { c.Capacity.Default = 1 },
			do: func(h *harness) {
				hb(h)
				for _, run := range []string{"r1", "r2"} {
					h.logs(wl("w1", "workerwatch.run.claimed", run, nil))
					h.logs(sl("w1", "workerwatch.run.claimed", run))
				}
				h.eval()
				h.advance(4 * sec)
				hb(h)
			},
			want:  contract.Reason{Code: contract.CodeOverCapacity, Value: 2, Threshold: 1},
			since: -1,
		},
		{
			name: "restored, nothing of its own yet",
			do: func(h *harness) {
				liveMem(100)(h)
				h.eval()
			},
			want:  contract.Reason{Code: contract.CodeNotReported},
			since: -1,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testCfg()
			cfg.Lost.ExitGrace = 2 * sec
			if c.cfg != nil {
				c.cfg(cfg)
			}
			h := newHarness(t, cfg)
			c.do(h)
			if c.want.Code == contract.CodeNotReported {
				h = restart(t, h)
			}
			h.eval()
			var got *contract.Reason
			for i, r := range h.worker("w1").Reasons {
				if r.Code == c.want.Code {
					got = &h.worker("w1").Reasons[i]
				}
				if r.Value <= r.Threshold && !r.Latched && r.Threshold > 0 && r.Code != contract.CodeRecovering &&
					r.Code != contract.CodeProcessExited && (r.Code == contract.CodeMemory || r.Code == contract.CodeCPU) {
					t.Errorf("%s shows %v against %v without being latched", r.Code, r.Value, r.Threshold)
				}
			}
			require.NotNil(t, got, "no %s among %v", c.want.Code, h.codes("w1"))
			assert.NotEmpty(t, got.Message)
			if c.since >= 0 {
				assert.Equal(t, h.clock.Now().Add(-c.since).UTC(), got.Since.UTC(), "since")
			}
			r := *got
			r.Message, r.Since, r.Role = "", time.Time{}, ""
			if r.Exit != nil {
				require.NotNil(t, r.Exit.Signal)
				assert.Equal(t, 9, *r.Exit.Signal)
				assert.Equal(t, contract.ExitSignal, r.Exit.How)
				r.Exit = nil
			}
			if c.want.Code == contract.CodeCPU {
				require.NotNil(t, r.Current)
				assert.InDelta(t, 0.2, *r.Current, 1e-9)
				assert.InDelta(t, 0.7/0.9, r.Recovery.Ratio, 1e-9)
				assert.InDelta(t, 1, r.Value, 1e-9)
				assert.InDelta(t, 0.9, r.Threshold, 1e-9)
				r.Current, c.want.Current = nil, nil
				r.Recovery.Ratio, c.want.Recovery.Ratio = 0, 0
				r.Value, r.Threshold, c.want.Value, c.want.Threshold = 0, 0, 0, 0
			}
			assert.Equal(t, c.want, r)
		})
	}
}
