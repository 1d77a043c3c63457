//go:build e2e

package e2e

// The judgement of issue 12 through the real binary, the real simulator and
// its real processes (docs/e2e.md, "Judgement"): OpenFn's names with a
// claims-only scheduler; events lost while the collector is down, with a
// scheduler that sends events, one that sends claims only and one that
// sends snapshots; a worker pinned to one CPU. Each scenario has its own
// collector watching only its own fleet, so they run in parallel.
//
//	make build && go test -tags e2e -count=1 -v -run TestJudge ./e2e/

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
)

// Documented bounds (docs/e2e.md, "Judgement"), for the e2e config
// (e2e/testdata/judge.yaml: collection and emit 1 s, drift.grace 3 s,
// drift.heal_after 20 s, snapshot_interval 2 s) on a loaded 2-core machine.
//
// Each bound is the documented rule times judgeLoadFactor: on a 2-core
// machine whose cores the suite's other scenarios keep busy, a collector and
// the simulated workers can each wait seconds for a CPU, so an evaluation or
// an export lands later than its interval. The figure seen is logged
// (RESULT lines). Measured: last false drift 24.5-30.3 s (events), 3.5-13 s
// (snapshots), docs/e2e.md.
const (
	judgeLoadFactor = 3
	// After the collector is back: drift.heal_after (20 s) + drift.grace
	// (3 s) + an export (1 s) and an emit interval (1 s) (the scheduler
	// sends events or claims only: its side heals by heal_after after the
	// worker's count let the worker's side go, or closes with it in
	// claims_only); 75 s.
	boundHealEvents = judgeLoadFactor * (20*time.Second + 3*time.Second + time.Second + time.Second)
	// Snapshots: one snapshot interval (2 s) + the grace period for the
	// worker's count (3 s), + an export and an emit interval; 21 s.
	boundHealSnapshots = judgeLoadFactor * (2*time.Second + 3*time.Second + time.Second + time.Second)
	// No false drift for this long once healed.
	quietAfterHeal = 10 * time.Second
)

// judge is one scenario's collector.
type judge struct {
	name, prefix           string
	health, otlp, schedAdr string
	telemetry              int
	env, args              []string
	col                    *proc
}

// startJudge starts a collector with e2e/testdata/judge.yaml (and the
// extra config files merged on top) for the fleet whose worker ids start
// with prefix.
func startJudge(t *testing.T, name, prefix, view string, extra ...string) *judge {
	t.Helper()
	j := &judge{
		name: name, prefix: prefix, health: freeport.Addr(t), otlp: freeport.Addr(t),
		schedAdr: freeport.Addr(t), telemetry: freeport.Port(t),
	}
	j.env = []string{
		"JUDGE_HEALTH=" + j.health, "JUDGE_OTLP_HTTP=" + j.otlp, "JUDGE_PREFIX=" + prefix,
		"JUDGE_VIEW=" + view, "JUDGE_STATE_DIR=" + filepath.Join(t.TempDir(), "state"),
		fmt.Sprintf("JUDGE_TELEMETRY_PORT=%d", j.telemetry),
	}
	j.args = []string{"--config", filepath.Join(repoRoot, "e2e", "testdata", "judge.yaml")}
	for _, f := range extra {
		j.args = append(j.args, "--config", f)
	}
	j.col = start(t, name+"-collector", j.env, collectorBinary(t), j.args...)
	waitReady(t, j.col, j.health)
	return j
}

// fleet starts the scenario's simulated fleet.
func (j *judge) fleet(t *testing.T, args ...string) {
	t.Helper()
	sim := need(t, "workersim", filepath.Join(binDir, "workersim"))
	all := append([]string{
		"fleet", "--otlp-endpoint", j.otlp, "--id-prefix", j.prefix, "--scheduler-addr", j.schedAdr,
		"--poll-interval", "200ms", "--export-interval", "500ms",
	}, args...)
	start(t, j.name+"-fleet", nil, sim, all...)
}

func (j *judge) worker(id string) (contract.Worker, error) {
	return worker(env{health: "http://" + j.health}, id)
}

// schedStatus is the simulated scheduler's own view (GET /v1/status).
type schedStatus struct {
	Held    map[string][]string `json:"held"`
	Dropped map[string][]string `json:"dropped"`
}

func (j *judge) status() (schedStatus, error) {
	var s schedStatus
	_, err := getJSON("http://"+j.schedAdr+"/v1/status", &s)
	return s, err
}

// counter reads one of the collector's own counters (0 when not reported yet).
func (j *judge) counter(name string, match ...string) float64 {
	txt, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", j.telemetry))
	if err != nil {
		return 0
	}
	v, _ := metricSum(txt, name, match...)
	return v
}

// noDrift says what drift a worker shows, "" when none.
func noDrift(w contract.Worker) string {
	d := w.Drift
	if len(d.Missing())+len(d.Orphaned())+d.MissingCount()+d.OrphanedCount()+d.OverCapacity() == 0 {
		return ""
	}
	return fmt.Sprintf("%s: missing %v (%d), orphaned %v (%d), over capacity %d", w.ID, d.Missing(), d.MissingCount(), d.Orphaned(), d.OrphanedCount(), d.OverCapacity())
}

// openfnConfig writes the documented OpenFn mapping
// (processor/workerhealthprocessor/testdata/openfn.yaml, the one the docs
// show) as a collector config to merge: the e2e judges with exactly it.
func openfnConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "processor", "workerhealthprocessor", "testdata", "openfn.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	out.WriteString("processors:\n  worker_health:\n")
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "worker_health/openfn:":
			in = true
		case in && line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#"):
			in = false
		case in:
			out.WriteString("  " + line + "\n")
		}
	}
	f := filepath.Join(t.TempDir(), "openfn.yaml")
	writeFile(t, f, out.String())
	return f
}

// TestJudgeOpenFn: the simulator speaks OpenFn's names (worker_name, claim,
// run:start, step:*, run:complete with reason/error_type; Lightning's claims
// only), judged with the documented OpenFn mapping: runs killed at their
// memory and time limits are counted by reason and never make their worker
// unhealthy, the main process's leak does (its main-role limit, within the
// documented samples), and the drift is exactly the runs whose claim never
// reached the worker.
func TestJudgeOpenFn(t *testing.T) {
	defer parallel(t, 50*time.Second)()
	// Faster than the preset: the main-role limit low enough for a leak of
	// 15 MiB per run to cross within seconds, no tree limit (OpenFn's
	// mapping has none; judge.yaml's would apply otherwise).
	fast := filepath.Join(t.TempDir(), "fast.yaml")
	writeFile(t, fast, `processors:
  worker_health:
    memory:
      soft_limit_bytes: 0
      roles:
        main:
          soft_limit_bytes: 104857600 # 100 MiB
`)
	j := startJudge(t, "judge-openfn", "oj-", "claims_only", openfnConfig(t), fast)
	const (
		wOOM, wTimeout, wLeak, wDrop, wOK = "oj-1", "oj-2", "oj-3", "oj-4", "oj-5"
	)
	j.fleet(t, "--workers", "5", "--faults", "oom,timeout,leak,drop-claims,none", "--seed", "12",
		"--dialect", "openfn", "--scheduler-view", "claims_only", "--drop-every", "3",
		"--capacity", "2", "--run-rate", "8", "--run-duration", "1500ms", "--run-memory", "16MiB",
		"--run-timeout", "3s", "--run-memory-limit", "60MiB", "--leak-bytes", "15MiB")

	var (
		violations     []string
		exactSeen      int                      // samples where the drop worker's drift held every settled dropped run
		droppedSince   = map[string]time.Time{} // when this test first saw each dropped run
		leakUnhealthy  *contract.Worker
		leakAt         time.Duration
		began          = time.Now()
		killsOOM       int64
		killsTimeout   int64
		maxMissingDrop int
	)
	eventually(t, 150*time.Second, 500*time.Millisecond, "OpenFn-style scenarios judged", func() error {
		st, err := j.status()
		if err != nil {
			return err
		}
		ws := map[string]contract.Worker{}
		for _, id := range []string{wOOM, wTimeout, wLeak, wDrop, wOK} {
			w, err := j.worker(id)
			if err != nil {
				return err
			}
			ws[id] = w
		}
		for _, id := range []string{wOOM, wTimeout, wOK} {
			if ws[id].State == contract.Unhealthy {
				violations = append(violations, fmt.Sprintf("%s unhealthy %+v, kills %v", id, ws[id].Reasons, ws[id].Runs.Kills))
			}
		}
		for _, id := range []string{wOOM, wTimeout, wLeak, wOK} {
			if d := noDrift(ws[id]); d != "" {
				violations = append(violations, "false drift: "+d)
			}
		}
		// The drop worker: drift only for runs it never got, and every
		// such run past the grace period.
		d := ws[wDrop].Drift
		dropped := st.Dropped[wDrop]
		for _, r := range d.Missing() {
			if !slices.Contains(dropped, r) {
				violations = append(violations, fmt.Sprintf("%s missing %s, which reached the worker", wDrop, r))
			}
		}
		if len(d.Orphaned()) > 0 || d.OverCapacity() > 0 {
			violations = append(violations, "false drift: "+noDrift(ws[wDrop]))
		}
		// Exact: every run the scheduler dropped long enough ago (drift.grace
		// 3 s, an evaluation, the exports and this poll: 10 s) is missing.
		// Runs dropped since may or may not show yet: the drop worker drops
		// a claim every couple of seconds, so the whole list is seldom
		// settled at once.
		settled := 0
		allShown := true
		for _, r := range dropped {
			if _, ok := droppedSince[r]; !ok {
				droppedSince[r] = time.Now()
			}
			if time.Since(droppedSince[r]) < 10*time.Second {
				continue
			}
			settled++
			if !slices.Contains(d.Missing(), r) {
				allShown = false
			}
		}
		if settled >= 2 && allShown {
			exactSeen++
		}
		maxMissingDrop = max(maxMissingDrop, len(d.Missing()))
		if w := ws[wLeak]; leakUnhealthy == nil && w.State == contract.Unhealthy {
			leakUnhealthy, leakAt = &w, time.Since(began)
		}
		killsOOM, killsTimeout = ws[wOOM].Runs.Kills[contract.KillMemoryLimit], ws[wTimeout].Runs.Kills[contract.KillTimeout]
		switch {
		case len(violations) > 0:
			t.Fatalf("%d violations, first: %s", len(violations), violations[0])
		case killsOOM < 3 || killsTimeout < 3:
			return fmt.Errorf("kills so far: memory_limit %d, timeout %d", killsOOM, killsTimeout)
		case leakUnhealthy == nil:
			return fmt.Errorf("%s %s %v, main role %+v", wLeak, ws[wLeak].State, reasonCodes(ws[wLeak]), roleOf(ws[wLeak], "main"))
		case exactSeen < 3:
			return fmt.Errorf("%s drift %v, dropped %v (exact %d times)", wDrop, d.Missing(), dropped, exactSeen)
		case time.Since(began) < 45*time.Second:
			return fmt.Errorf("observing for 45s")
		}
		return nil
	})

	// The leak: unhealthy on its main role within the documented samples:
	// at once when a run starts over the limit (memory.at_run_start), else
	// after memory.unhealthy_samples (3) samples over it (the API is read up
	// to a sample later).
	var leakReason *contract.Reason
	for _, r := range leakUnhealthy.Reasons {
		if r.Role != contract.RoleMain {
			continue
		}
		switch {
		case r.Code == "memory_over_soft_limit_at_run_start":
			leakReason = &r
		case r.Code == "memory_over_soft_limit" && leakReason == nil:
			leakReason = &r
		}
	}
	if leakReason == nil {
		t.Fatalf("%s unhealthy without a main-role memory reason: %+v", wLeak, leakUnhealthy.Reasons)
	}
	over := roleOf(*leakUnhealthy, "main").OverSamples
	if leakReason.Code == "memory_over_soft_limit" && (over < 3 || over > 4) {
		t.Errorf("%s unhealthy after %d samples over its main-role limit, want 3 (4 read a sample late)", wLeak, over)
	}
	// The tree and the worker's own telemetry (worker_name) are one worker.
	ok, _ := j.worker(wOK)
	if !ok.Sources.Tree().Seen || !slices.Equal(ok.Sources.Telemetry().IDs.List(), []string{"worker_name=" + wOK}) || ok.Memory.RSSBytes == 0 {
		t.Errorf("%s: tree and telemetry did not join: %+v, rss %d", wOK, ok.Sources, ok.Memory.RSSBytes)
	}
	t.Logf("e2e: RESULT openfn: kills memory_limit %d (%s), timeout %d (%s), none unhealthy; %s unhealthy %.1fs in (%s, main %d B over %d B after %d samples over); %s drift held every never-started run dropped 10 s or more before in %d samples (up to %d runs), never a run that reached it; no false drift on the others",
		killsOOM, wOOM, killsTimeout, wTimeout, wLeak, leakAt.Seconds(), leakReason.Code, int64(leakReason.Value), int64(leakReason.Threshold),
		over, wDrop, exactSeen, maxMissingDrop)
}

func roleOf(w contract.Worker, role string) contract.RoleMemory {
	for _, r := range w.Memory.Roles {
		if r.Role == role {
			return r
		}
	}
	return contract.RoleMemory{}
}

// TestJudgeLostEvents: the collector is stopped for 15 s while the fleet
// runs; the workers' and the scheduler's SDKs drop what they cannot send
// (3 s of retries). Once the collector is back, every false drift the lost
// events left behind heals within the documented bound and none returns: with
// a scheduler that sends events (drift.heal_after, the workers' runs.active),
// with one that sends claims only (OpenFn's Lightning: the worker's end, or
// its count, closes the claim; drift.heal_after the rest) and with one that
// sends snapshots (the next snapshot). A drop-claims worker
// in the snapshots fleet shows that real drift is still seen.
func TestJudgeLostEvents(t *testing.T) {
	defer parallel(t, 110*time.Second)() // its longest subtest
	for _, tc := range []struct {
		view, prefix    string
		bound, expected time.Duration // expected: parallel's
	}{
		{contract.ViewEvents, "le-", boundHealEvents, 105 * time.Second},
		{contract.ViewClaimsOnly, "lc-", boundHealEvents, 110 * time.Second},
		{contract.ViewSnapshots, "ls-", boundHealSnapshots, 55 * time.Second},
	} {
		t.Run(tc.view, func(t *testing.T) {
			defer parallel(t, tc.expected)()
			j := startJudge(t, "judge-lost-"+tc.view, tc.prefix, tc.view)
			healthy := []string{tc.prefix + "1", tc.prefix + "2", tc.prefix + "3", tc.prefix + "4"}
			drop := tc.prefix + "5"
			j.fleet(t, "--workers", "5", "--faults", "none,none,none,none,drop-claims", "--drop-every", "2",
				"--seed", "21", "--scheduler-view", tc.view, "--snapshot-interval", "2s",
				"--capacity", "2", "--run-rate", "3", "--run-duration", "3s", "--run-memory", "8MiB")
			for _, id := range healthy {
				waitStateJ(t, j, id, 60*time.Second, contract.Healthy)
			}
			// Runs in flight on the workers, then the outage.
			eventually(t, 30*time.Second, 250*time.Millisecond, "runs in flight", func() error {
				busy := 0
				for _, id := range healthy {
					if w, err := j.worker(id); err == nil && len(w.Runs.Worker) > 0 {
						busy++
					}
				}
				if busy < 3 {
					return fmt.Errorf("%d workers hold runs", busy)
				}
				return nil
			})
			j.col.stop(t)
			down := time.Now()
			time.Sleep(15*time.Second - time.Since(down))
			j.col = start(t, j.name+"-collector-2", j.env, collectorBinary(t), j.args...)
			waitReady(t, j.col, j.health)
			back := time.Now()
			t.Logf("e2e: %s: collector down %.1fs", tc.view, back.Sub(down).Seconds())

			// False drift the lost events left may show until the bound,
			// none after it; the real drift of the drop worker is still
			// judged.
			var lastFalse time.Duration
			var lastDrift []string
			maxFalse, realSeen := 0, false
			eventually(t, tc.bound+quietAfterHeal+15*time.Second, 500*time.Millisecond, "the bound and a quiet period", func() error {
				var now []string
				for _, id := range healthy {
					w, err := j.worker(id)
					if err != nil {
						return err
					}
					if d := noDrift(w); d != "" {
						now = append(now, d)
					}
				}
				if w, err := j.worker(drop); err == nil && len(w.Drift.Missing()) > 0 {
					realSeen = true
				}
				since := time.Since(back)
				if len(now) > 0 {
					if since > tc.bound {
						t.Fatalf("false drift %.1fs after the collector came back (bound %s): %v", since.Seconds(), tc.bound, now)
					}
					lastFalse, maxFalse, lastDrift = since, max(maxFalse, len(now)), now
				}
				if since < tc.bound+quietAfterHeal || !realSeen {
					return fmt.Errorf("%.1fs after the collector came back, real drift seen %v", since.Seconds(), realSeen)
				}
				return nil
			})
			healed := j.counter("otelcol_processor_worker_health_runs_healed")
			if healed == 0 && maxFalse == 0 {
				t.Fatalf("nothing was lost: no false drift and no run healed (the outage did not test anything)")
			}
			t.Logf("e2e: RESULT lost events (%s): false drift last seen %.1fs after the collector came back (%v; bound %s; on up to %d workers at once), none from the bound on for %s; %.0f runs healed; the drop-claims worker's real drift still shown",
				tc.view, lastFalse.Seconds(), lastDrift, tc.bound, maxFalse, quietAfterHeal, healed)
		})
	}
}

func waitStateJ(t *testing.T, j *judge, id string, within time.Duration, want contract.State) {
	t.Helper()
	eventually(t, within, 250*time.Millisecond, id+" "+string(want), func() error {
		w, err := j.worker(id)
		if err == nil && w.State != want {
			err = fmt.Errorf("state %s %v", w.State, reasonCodes(w))
		}
		return err
	})
}
