//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestScaleShardShutdown measures what docs/scaling.md says about a large
// shard's shutdown: one shard (gateway-static.yaml as in the figures) holding
// WORKERWATCH_SHUTDOWN_WORKERS workers, each with a run, through two
// evaluations; then SIGTERM, and the time to exit. With
// WORKERWATCH_SHUTDOWN_BATCH=1 the metrics pipeline gets back the batch
// processor the shipped gateway configs had before Prometheus (the
// comparison). Opt-in: a minute of full load.
func TestScaleShardShutdown(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("WORKERWATCH_SHUTDOWN_WORKERS"))
	if n <= 0 {
		t.Skip("set WORKERWATCH_SHUTDOWN_WORKERS=30000 (docs/scaling.md, Shutdown)")
	}
	bin := collectorBinary(t)
	tmp := t.TempDir()
	var extra []string
	pipeline := "[memory_limiter, worker_health] (as shipped)"
	if os.Getenv("WORKERWATCH_SHUTDOWN_BATCH") != "" {
		pipeline = "[memory_limiter, worker_health, batch]"
		f := filepath.Join(tmp, "batch.yaml")
		writeFile(t, f, "service:\n  pipelines:\n    metrics:\n      processors: [memory_limiter, worker_health, batch]\n")
		extra = []string{"--config", f}
	}
	tr := startFigTier(t, bin, tmp, "shutdown", 1, nil, extra...)
	tr.load(t, n)
	time.Sleep(25 * time.Second) // two evaluations with every worker
	tr.agent.stop(t)
	p := tr.shards[0]
	began := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("the shard did not exit within 5 minutes of SIGTERM:\n%s", p.tail())
	}
	t.Logf("e2e: RESULT shard shutdown: %d workers, metrics processors %s: SIGTERM to exit %.1f s",
		n, pipeline, time.Since(began).Seconds())
}
