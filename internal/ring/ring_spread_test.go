package ring

import (
	"fmt"
	"os"
	"testing"
)

// TestRingSpread: how evenly the ring (the load_balancing exporter's, 200
// points a shard) spreads 1,000,000 worker ids over 3 to 130 shards, named
// as the StatefulSet's pods are. docs/scaling.md plans shards by the
// largest share; the test fails if it exceeds 1.5 x the mean. Opt-in (a
// few seconds; more under -race): WORKERWATCH_SCALE_FIGURES=1.
func TestRingSpread(t *testing.T) {
	if os.Getenv("WORKERWATCH_SCALE_FIGURES") == "" {
		t.Skip("set WORKERWATCH_SCALE_FIGURES=1")
	}
	const ids = 1000000
	for _, n := range []int{3, 10, 100, 130} {
		var eps []string
		for i := range n {
			eps = append(eps, fmt.Sprintf("workerwatch-gateway-%d.workerwatch-gateway-shards.workerwatch.svc.cluster.local:4317", i))
		}
		r := New(eps)
		count := map[string]int{}
		for i := range ids {
			count[r.Owner(fmt.Sprintf("worker-%07d", i))]++
		}
		largest, smallest := 0, ids
		for _, c := range count {
			largest, smallest = max(largest, c), min(smallest, c)
		}
		mean := float64(ids) / float64(n)
		t.Logf("RESULT %3d shards: mean %7.0f, largest %7d (%.2f x), smallest %7d (%.2f x)",
			n, mean, largest, float64(largest)/mean, smallest, float64(smallest)/mean)
		if float64(largest) > 1.5*mean {
			t.Errorf("%d shards: the largest share is %.2f x the mean", n, float64(largest)/mean)
		}
	}
}
