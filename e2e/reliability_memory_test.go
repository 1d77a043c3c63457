//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReliabilityMemoryTiers starts every shipped config (config.yaml,
// deploy/collector/*.yaml, presets/*/*.yaml; run here as the slow-client test
// runs them: listeners, state and export targets moved) at once, idle, and
// reports each one's resident memory split into anonymous memory (heap,
// stacks, the Go runtime: what the memory_limiter and GOMEMLIMIT bound) and
// file pages (the executable's code and read-only data, the same for every
// config: at most its loaded segments, clean and shared, dropped by the
// kernel under pressure). docs/reliability.md ("Memory") takes its table
// from here. A config whose idle anonymous memory is already over half its
// limit_mib leaves too little for its data, and fails.
//
//	make build && go test -tags e2e -count=1 -v -run TestReliabilityMemoryTiers ./e2e/
func TestReliabilityMemoryTiers(t *testing.T) {
	defer parallel(t, 40*time.Second)()
	bin := collectorBinary(t)
	code := mappedSize(t, bin)
	var configs []string
	for _, pattern := range []string{"config.yaml", "deploy/collector/*.yaml", "presets/*/*.yaml"} {
		m, _ := filepath.Glob(filepath.Join(repoRoot, pattern))
		for _, f := range m {
			if !strings.HasSuffix(f, ".overlay.yaml") && isCollectorConfig(f) {
				configs = append(configs, f)
			}
		}
	}
	if len(configs) < 3 {
		t.Fatalf("only %d shipped configs found: %v", len(configs), configs)
	}
	cols := make([]*proc, len(configs))
	for i, cfg := range configs {
		_, _, cols[i] = runShippedConfig(t, bin, cfg)
	}
	// Idle, after the first evaluations and scrapes; the largest of 5
	// samples 2 s apart (the GC's sawtooth).
	time.Sleep(15 * time.Second)
	peaks := make([]residentSplit, len(configs))
	rss := make([]int64, len(configs))
	for range 5 {
		for i, c := range cols {
			if c.exited() {
				t.Fatalf("%s exited:\n%s", c.name, c.tail())
			}
			s, err := readResidentSplit(c.cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			peaks[i].anon, peaks[i].file = max(peaks[i].anon, s.anon), max(peaks[i].file, s.file)
			rss[i] = max(rss[i], s.anon+s.file)
		}
		time.Sleep(2 * time.Second)
	}

	mib := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	var table strings.Builder
	fmt.Fprintf(&table, "| %-44s | %-22s | %9s | %10s | %10s |\n", "config", "memory_limiter", "RSS MiB", "anon. MiB", "file MiB")
	for i, cfg := range configs {
		rel, _ := filepath.Rel(repoRoot, cfg)
		raw, _ := os.ReadFile(cfg)
		limit := "-"
		if m := regexp.MustCompile(`(?m)^\s+limit_mib: (\d+)`).FindSubmatch(raw); m != nil {
			limit = "limit_mib " + string(m[1])
			if lim := limitMiBOf(t, cfg); peaks[i].anon > int64(lim)<<19 {
				t.Errorf("%s: idle anonymous memory %s MiB is over half its limit_mib %d", rel, mib(peaks[i].anon), lim)
			}
		} else if m := regexp.MustCompile(`(?m)^\s+limit_percentage: (\d+)`).FindSubmatch(raw); m != nil {
			limit = "limit_percentage " + string(m[1])
		}
		fmt.Fprintf(&table, "| %-44s | %-22s | %9s | %10s | %10s |\n", rel, limit, mib(rss[i]), mib(peaks[i].anon), mib(peaks[i].file))
	}
	t.Logf("e2e: RESULT idle memory of every shipped config (the largest of 5 samples; the executable's loaded segments: %s MiB):\n%s",
		mib(code), table.String())
}
