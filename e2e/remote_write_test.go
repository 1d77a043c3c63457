//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
)

// TestGatewayRemoteWrite (issue 24): a tier of two gateway shards as
// shipped (gateway-static.yaml: metrics pushed with remote write), pushing
// to a real Prometheus started with --web.enable-remote-write-receiver and
// loading the shipped alert rules; an agent as shipped
// (agent-sharded-static.yaml) watching a simulated fleet's real process
// trees in front of them. With the processor's timings of the scale test
// (scale-gateway.overlay.yaml: emit every second).
//
//   - every worker's state in Prometheus, asked as the shipped alert rules
//     ask it, is the health API's, and the agent's tree metrics arrive on the
//     worker (`workerwatch_worker_present_ratio`);
//   - the shards' fleet figures add up to the fleet: each shard's series
//     carry its workerwatch_shard label (without it both shards push
//     workerwatch_fleet_workers with the same labels, and Prometheus takes
//     them for one series);
//   - the leak worker turns unhealthy and the shipped WorkerUnhealthy alert
//     is pending or firing for it; the state it left reads 0 at once, not a
//     1 left standing until Prometheus's lookback ends (remote write has no
//     scrape that drops a series);
//   - the shards' own telemetry is scraped (`up` for CollectorDown);
//   - the gateways log no error (Prometheus refusing a sample, out of order
//     or otherwise, is one).
func TestGatewayRemoteWrite(t *testing.T) {
	defer parallel(t, 10*time.Second)()
	bin := collectorBinary(t)
	simBin := need(t, "workersim", filepath.Join(binDir, "workersim"))
	promBin := need(t, "prometheus", "/usr/bin/prometheus")
	tmp := t.TempDir()
	prefix := runPrefix + "rw-"
	e := env{pidDir: filepath.Join(tmp, "pids")}

	// Prometheus: remote write in, the shipped rules, and a scrape of the
	// shard's own telemetry only.
	promWeb := freeport.Addr(t)
	type shard struct {
		otlp, api string
		tel       int
		p         *proc
	}
	gws := []*shard{{otlp: freeport.Addr(t), api: freeport.Addr(t), tel: freeport.Port(t)}, {otlp: freeport.Addr(t), api: freeport.Addr(t), tel: freeport.Port(t)}}
	e.prom, e.health = "http://"+promWeb, "http://"+gws[0].api
	promCfg := filepath.Join(tmp, "prometheus.yml")
	// out_of_order_time_window as docs/deployment.md asks of a Prometheus
	// that takes remote write from gateways: the agents' queues export
	// side by side, so two samples of one series can arrive out of order.
	writeFile(t, promCfg, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
storage:
  tsdb:
    out_of_order_time_window: 10m
rule_files: [%q]
scrape_configs:
  - job_name: workerwatch-gateway
    static_configs:
      - targets: ["127.0.0.1:%d", "127.0.0.1:%d"]
`, filepath.Join(repoRoot, "deploy", "prometheus", "alerts.yaml"), gws[0].tel, gws[1].tel))
	prom := start(t, "rw-prometheus", nil, promBin, "--config.file="+promCfg, "--web.enable-remote-write-receiver",
		"--storage.tsdb.path="+filepath.Join(tmp, "prom"), "--web.listen-address="+promWeb)
	waitListening(t, prom, promWeb)

	members := filepath.Join(tmp, "members.yaml")
	writeFile(t, members, fmt.Sprintf(`extensions:
  worker_health:
    cluster:
      static:
        members:
          - {endpoint: %q, api: %q}
          - {endpoint: %q, api: %q}
`, gws[0].otlp, gws[0].api, gws[1].otlp, gws[1].api))
	for i, g := range gws {
		g.p = start(t, fmt.Sprintf("rw-gateway-%d", i+1), []string{
			"WORKERWATCH_SELF=" + g.otlp, "WORKERWATCH_OTLP_GRPC=" + g.otlp, "WORKERWATCH_API=" + g.api,
			"WORKERWATCH_REMOTE_WRITE=" + e.prom + "/api/v1/write",
			"WORKERWATCH_TELEMETRY_HOST=127.0.0.1", "WORKERWATCH_TELEMETRY_PORT=" + strconv.Itoa(g.tel),
			"WORKERWATCH_STATE_DIR=" + filepath.Join(tmp, fmt.Sprintf("gw%d", i+1)), "TRACES_ENDPOINT=127.0.0.1:1", "LOGS_ENDPOINT=http://127.0.0.1:1",
		}, bin, "--config", deployConfig("gateway-static.yaml"), "--config", e2eConfig("scale-gateway.overlay.yaml"), "--config", members)
	}
	for _, g := range gws {
		waitReady(t, g.p, g.api)
	}

	// The agent: this run's workers' trees every second, everything to the shard.
	agentOverlay := filepath.Join(tmp, "agent.yaml")
	writeFile(t, agentOverlay, ownFleetSelector(prefix)+fmt.Sprintf(`    collection_interval: 1s
    discovery_interval: 2s
processors:
  batch:
    timeout: 500ms
exporters:
  load_balancing:
    resolver:
      static:
        hostnames: [%q, %q]
`, gws[0].otlp, gws[1].otlp))
	agentHTTP, agentAPI := freeport.Addr(t), freeport.Addr(t)
	agent := start(t, "rw-agent", []string{
		"WORKERWATCH_OTLP_GRPC=" + freeport.Addr(t), "WORKERWATCH_OTLP_HTTP=" + agentHTTP, "WORKERWATCH_API=" + agentAPI,
		"WORKERWATCH_STATE_DIR=" + filepath.Join(tmp, "agent"), "WORKERWATCH_TELEMETRY_HOST=127.0.0.1",
		fmt.Sprintf("WORKERWATCH_TELEMETRY_PORT=%d", freeport.Port(t)), "K8S_NODE_NAME=rw-agent",
	}, bin, "--config", deployConfig("agent-sharded-static.yaml"), "--config", agentOverlay)
	waitReady(t, agent, agentAPI)

	leak, ids := prefix+"1", []string{prefix + "1", prefix + "2", prefix + "3"}
	started := time.Now()
	fleet := start(t, "rw-fleet", nil, simBin, "fleet", "--workers", "3", "--faults", "leak,none,none", "--id-prefix", prefix,
		"--seed", "24", "--otlp-endpoint", agentHTTP, "--pid-dir", e.pidDir,
		"--run-rate", "3", "--leak-bytes", "40MiB", "--run-timeout", "60s",
		"--export-interval", "1s", "--heartbeat-interval", "1s", "--poll-interval", "500ms")
	defer fleet.stop(t)

	// stateIs: the worker's state as the shipped rules ask it (== 1), and
	// no other state at 1.
	stateIs := func(id string, want contract.State) error {
		res, err := promQuery(e.prom, fmt.Sprintf(`max by (workerwatch_worker_state) (workerwatch_worker_state_ratio{cicd_worker_id=%q}) == 1`, id))
		if err != nil {
			return err
		}
		var at1 []string
		for _, s := range res {
			at1 = append(at1, s.Metric["workerwatch_worker_state"])
		}
		if len(at1) != 1 || at1[0] != string(want) {
			return fmt.Errorf("%s: states at 1 in Prometheus %v, the health API says %s", id, at1, want)
		}
		return nil
	}

	t.Run("every worker's state in Prometheus is the health API's, and its tree arrives", func(t *testing.T) {
		eventually(t, 90*time.Second, time.Second, "the fleet's states in Prometheus", func() error {
			for _, id := range ids {
				w, err := worker(e, id)
				if err != nil {
					return err
				}
				if err := stateIs(id, w.State); err != nil {
					return err
				}
				if v, ok, err := promValue(e.prom, fmt.Sprintf(`workerwatch_worker_present_ratio{cicd_worker_id=%q}`, id)); err != nil || !ok || v != 1 {
					return fmt.Errorf("%s: workerwatch_worker_present_ratio %g %v %v", id, v, ok, err)
				}
			}
			return nil
		})
		t.Logf("e2e: the fleet's states and trees in Prometheus %.1fs after the fleet started", time.Since(started).Seconds())
	})

	t.Run("the shards' fleet figures add up to the fleet, each shard's labeled", func(t *testing.T) {
		eventually(t, 60*time.Second, time.Second, "the fleet summed over the shards", func() error {
			v, ok, err := promValue(e.prom, `sum(workerwatch_fleet_workers)`)
			if err != nil || !ok || v != float64(len(ids)) {
				return fmt.Errorf("sum(workerwatch_fleet_workers) = %g (present %v, %v), want %d", v, ok, err, len(ids))
			}
			res, err := promQuery(e.prom, `count by (workerwatch_shard) (workerwatch_fleet_workers)`)
			if err != nil {
				return err
			}
			var got []string
			for _, x := range res {
				got = append(got, x.Metric["workerwatch_shard"])
			}
			slices.Sort(got)
			want := []string{gws[0].otlp, gws[1].otlp}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				return fmt.Errorf("fleet series from shards %q, want %q", got, want)
			}
			return nil
		})
	})

	t.Run("the leak worker turns unhealthy and the shipped alert fires for it", func(t *testing.T) {
		waitState(t, e, leak, 120*time.Second-time.Since(started), contract.Unhealthy)
		eventually(t, 30*time.Second, time.Second, "unhealthy in Prometheus", func() error { return stateIs(leak, contract.Unhealthy) })
		eventually(t, 30*time.Second, time.Second, "WorkerUnhealthy for "+leak, func() error {
			return alertActive(e.prom, "WorkerUnhealthy", leak)
		})
		// The state it left reads 0 at once, not a 1 left standing until
		// Prometheus's lookback ends (remote write has no scrape that drops
		// a series).
		v, ok, err := promValue(e.prom, fmt.Sprintf(`workerwatch_worker_state_ratio{cicd_worker_id=%q,workerwatch_worker_state="healthy"}`, leak))
		if err != nil || !ok || v != 0 {
			t.Errorf("healthy reads %g (present %v, %v), want 0", v, ok, err)
		}
	})

	t.Run("the shard's own telemetry is scraped", func(t *testing.T) {
		promEqualsWithin(t, e.prom, `sum(up{job="workerwatch-gateway"})`, 2, 30*time.Second)
	})

	t.Run("a shard stopped ends its series in Prometheus at once, not after the lookback", func(t *testing.T) {
		stopped := gws[1]
		q := func(metric string) string {
			return fmt.Sprintf(`count(%s{workerwatch_shard=%q})`, metric, stopped.otlp)
		}
		for _, m := range []string{"workerwatch_fleet_workers", "workerwatch_worker_state_ratio"} {
			if v, ok, err := promValue(e.prom, q(m)); m == "workerwatch_fleet_workers" && (err != nil || !ok || v == 0) {
				t.Fatalf("%s of the shard to stop: %g %v %v", q(m), v, ok, err)
			}
		}
		began := time.Now()
		stopped.p.stop(t)
		// Prometheus's lookback is 5 minutes: a series that merely stopped
		// would still be counted for that long.
		eventually(t, 30*time.Second, time.Second, "the stopped shard's series ended", func() error {
			for _, m := range []string{"workerwatch_fleet_workers", "workerwatch_worker_state_ratio"} {
				if v, ok, err := promValue(e.prom, q(m)); err != nil || ok {
					return fmt.Errorf("%s = %g (present %v, %v)", q(m), v, ok, err)
				}
			}
			return nil
		})
		t.Logf("e2e: the stopped shard's series ended in Prometheus %.1fs after SIGTERM", time.Since(began).Seconds())
	})

	t.Run("the gateway logged no error", func(t *testing.T) {
		for _, g := range gws {
			for _, line := range errorLines(g.p.log) {
				t.Errorf("%s logged an error: %.400s", g.p.name, line)
			}
		}
		// Prometheus logs (logfmt) a remote-write request it refused.
		b, _ := os.ReadFile(prom.log)
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(l, "level=error") && (strings.Contains(l, "remote") || strings.Contains(l, "out of order")) {
				t.Errorf("Prometheus: %.400s", l)
			}
		}
	})
}
