package tracker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// at is a worker's record about run at a time of its own (the records'
// times tell a re-run from a late or duplicated record).
func (h *harness) at(event, run string, ts time.Time, attrs map[string]any) {
	h.logs(workerLogs("worker", rec{Worker: "w1", Event: event, Run: run, Attrs: attrs, TS: ts}))
}

type attemptRow struct {
	id      string
	attempt int
	result  string
	kill    string
}

func (h *harness) recent() []attemptRow {
	var out []attemptRow
	for _, r := range h.snap("w1").Runs.Recent.Records() {
		out = append(out, attemptRow{r.ID, r.Attempt, r.Result, r.KillReason})
	}
	return out
}

// TestAttempts: a run is (id, attempt). A re-run of an ended run (a start
// after its end) is an attempt of its own with its own outcome; attempts a
// sender numbers (workerwatch.run.attempt) are kept apart, a late record of
// an earlier one goes to it; kills count per attempt; the recent runs are
// ordered by their newest activity; a restore keeps the attempts.
func TestAttempts(t *testing.T) {
	sec := time.Second
	fail := map[string]any{"cicd.pipeline.result": "failure"}
	ok := map[string]any{"cicd.pipeline.result": "success"}

	t.Run("a re-run under the same id", func(t *testing.T) {
		h := newHarness(t, testCfg())
		h.at("workerwatch.run.started", "r1", t0, nil)
		h.at("workerwatch.run.finished", "r1", t0.Add(sec), fail)
		h.advance(sec)
		h.at("workerwatch.run.started", "r1", t0.Add(5*sec), nil)
		assert.Equal(t, []string{"r1"}, h.snap("w1").Runs.Worker, "the new attempt is held")
		// A duplicate of the first start (its own time): no third attempt.
		h.at("workerwatch.run.started", "r1", t0, nil)
		h.advance(sec)
		h.at("workerwatch.run.finished", "r1", t0.Add(6*sec), ok)
		assert.Equal(t, []attemptRow{{"r1", 2, "success", ""}, {"r1", 1, "failure", ""}}, h.recent(),
			"both attempts with their own outcomes, the newest first")
		assert.Empty(t, h.snap("w1").Runs.Worker)

		// Kept across a restore.
		h2 := restart(t, h)
		assert.Equal(t, []attemptRow{{"r1", 2, "success", ""}, {"r1", 1, "failure", ""}}, h2.recent())
	})
	t.Run("numbered by the sender", func(t *testing.T) {
		h := newHarness(t, testCfg())
		one := map[string]any{contract.AttrRunAttempt: 1}
		two := map[string]any{contract.AttrRunAttempt: 2}
		h.at("workerwatch.run.started", "j", t0, one)
		h.advance(sec)
		// The second attempt starts before the first's end arrives (a
		// stall: the first is still running on a hung loop).
		h.at("workerwatch.run.started", "j", t0.Add(sec), two)
		h.advance(sec)
		h.at("workerwatch.run.finished", "j", t0.Add(2*sec), map[string]any{contract.AttrRunAttempt: 2, "cicd.pipeline.result": "failure"})
		h.advance(sec)
		h.at("workerwatch.run.finished", "j", t0.Add(3*sec), map[string]any{contract.AttrRunAttempt: 1, "cicd.pipeline.result": "success"})
		assert.Equal(t, []attemptRow{{"j", 1, "success", ""}, {"j", 2, "failure", ""}}, h.recent(),
			"each attempt's end on its own attempt, ordered by the newest activity")
	})
	t.Run("a retry, the scheduler's claim first", func(t *testing.T) {
		// Celery's order: the broker's claim of the retry may come before
		// the worker's start; both say the attempt. No drift, each attempt
		// its own.
		h := newHarness(t, testCfg())
		n := func(i int, more map[string]any) map[string]any {
			m := map[string]any{contract.AttrRunAttempt: i}
			for k, v := range more {
				m[k] = v
			}
			return m
		}
		sched := func(event string, i int) {
			h.logs(schedLogs(rec{Worker: "w1", Event: event, Run: "t1", Attrs: n(i, nil)}))
		}
		h.at("workerwatch.run.started", "t1", t0, n(1, nil))
		sched("workerwatch.run.claimed", 1)
		h.advance(sec)
		h.at("workerwatch.run.released", "t1", t0.Add(sec), n(1, nil))
		sched("workerwatch.run.released", 1)
		h.advance(sec)
		sched("workerwatch.run.claimed", 2)
		h.at("workerwatch.run.started", "t1", t0.Add(2*sec), n(2, nil))
		h.eval()
		snap := h.snap("w1")
		assert.Equal(t, []string{"t1"}, snap.Runs.Worker)
		assert.Equal(t, []string{"t1"}, snap.Runs.Scheduler)
		h.advance(4 * sec)
		hb(h)
		h.eval()
		assert.Empty(t, h.snap("w1").Drift.Orphaned(), "the retry is held by both sides")
		assert.Empty(t, h.snap("w1").Drift.Missing())
		h.at("workerwatch.run.finished", "t1", t0.Add(7*sec), n(2, ok))
		sched("workerwatch.run.finished", 2)
		assert.Equal(t, []attemptRow{{"t1", 2, "success", ""}}, h.recent(), "the retried attempt was released: not a recent run")
		assert.Empty(t, h.snap("w1").Runs.Worker)
		assert.Empty(t, h.snap("w1").Runs.Scheduler)
	})
	t.Run("kills per attempt", func(t *testing.T) {
		h := newHarness(t, testCfg())
		for i := range 2 {
			ts := t0.Add(time.Duration(10*i) * sec)
			h.at("workerwatch.run.started", "r1", ts, nil)
			h.at("workerwatch.run.killed", "r1", ts.Add(sec), map[string]any{"workerwatch.kill.reason": "crash", "cicd.pipeline.result": "error"})
			h.advance(sec)
		}
		assert.Equal(t, map[string]int64{"crash": 2}, h.snap("w1").Runs.Kills)
		assert.Equal(t, []attemptRow{{"r1", 2, "error", "crash"}, {"r1", 1, "error", "crash"}}, h.recent())
	})
	t.Run("not a re-run", func(t *testing.T) {
		// Records with no time of their own, or earlier than the end:
		// late or duplicated, the ended attempt's (no resurrection).
		h := newHarness(t, testCfg())
		h.at("workerwatch.run.started", "r1", t0.Add(sec), nil)
		h.at("workerwatch.run.finished", "r1", t0.Add(2*sec), ok)
		h.at("workerwatch.run.claimed", "r1", t0, nil)
		h.logs(wl("w1", "workerwatch.run.started", "r1", nil))
		require.Len(t, h.recent(), 1)
		assert.Equal(t, attemptRow{"r1", 0, "success", ""}, h.recent()[0], "one attempt: not numbered")
		assert.Empty(t, h.snap("w1").Runs.Worker)
	})
}
