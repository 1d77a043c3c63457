//go:build e2e

package e2e

// Issue 15: gateway shards behind the real load_balancing exporter, on one
// machine. Two agents (deploy/collector/agent-sharded.yaml) each watch the
// trees and receive the OTLP of half of a simulated fleet of 100 workers
// (the scheduler's OTLP goes to the first) and route every record by
// cicd.worker.id to three shards (deploy/collector/gateway.yaml) found by
// the exporter's DNS resolver; a single gateway (gateway-static.yaml with
// one member) receives the same records from the same agents. The gateways
// are scraped (deploy/collector/prometheus-exporter.overlay.yaml over each):
// what this test asserts of a dead or departed shard's series in Prometheus
// (gone within the exporter's expiry, each worker counted once) is the
// scraped shape's; a pushed series stays for Prometheus's lookback
// (docs/scaling.md), and the pushed shape, the gateway files' own, is
// TestGatewayRemoteWrite's. Everything is asserted through the health API
// and Prometheus:
//   - each worker is judged by exactly one shard, and the tier's verdicts and
//     drift lists equal the single gateway's;
//   - a shard SIGKILLed: its agents queue, then (once the name no longer
//     lists it, as Kubernetes drops a dead pod from a headless Service) its
//     workers are judged by the survivors within boundMove, with no `lost`
//     and the same verdicts and drift as the single gateway;
//   - the shard back: its workers return to it, each counted once;
//   - a scheduler asking ONE shard for every worker, all along, never gets
//     a 404 nor a wrong answer: a verdict, or 503 `unknown` with reason
//     `moving` / `owner_unreachable` during the documented window.
// DNS on one machine: the collectors of the tier run in their own mount
// namespace (unshare) where /etc/hosts is this test's file, so the real
// resolver code of the exporter and of the extension resolves the shards'
// name to 127.0.0.11-13 (loopback addresses), and the test changes the file
// as the endpoints controller changes a headless Service. Needs root (CI is).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
)

// The fleet's ids carry the run's prefix (runPrefix): the agents' selector
// matches this run's workers only, never another session's on the host.
var (
	scaleIDPrefix = runPrefix + "worker-"
	wScaleLeak    = scaleIDPrefix + "1"
	wScaleHang    = scaleIDPrefix + "2"
	wScaleDrop    = scaleIDPrefix + "3"
	wScaleOrph    = scaleIDPrefix + "4"
)

const (
	scaleWorkers = 100
	// Workers 1-4 have a fault, the other 96 none: verdicts differ from
	// worker to worker (unhealthy, stalled, missing and orphaned drift).
	scaleFaults = "leak,hang,drop-claims,orphan"
	shardsName  = "shards.scale.e2e"

	// Documented bounds (docs/scaling.md), generous for a loaded 2-core
	// machine. boundJudged: every worker has a verdict after the fleet
	// started. boundMove: after the name changed (a shard dropped or
	// back), every worker that moved is judged by its new owner with the
	// single gateway's verdict: the resolvers' interval (1 s here) + Go's
	// /etc/hosts cache (5 s) + the agents' retry backoff (<= 10 s) + a tree
	// sample and two evaluations.
	boundJudged = 120 * time.Second
	// boundFaults: the leak worker over the soft limit (40 MiB a run, a run
	// every ~20 s, 100 MiB), the hang worker stalled, dropped claims missing.
	boundFaults = 240 * time.Second
	boundMove   = 45 * time.Second
	// boundEqual: verdicts of two gateways fed the same records settle on
	// the same value within this (evaluations are 1 s apart, not aligned).
	boundEqual = 90 * time.Second
)

// scaleTier is the tier under test.
type scaleTier struct {
	t       *testing.T
	bin     string
	tmp     string
	hosts   string
	ports   struct{ otlp, api, prom, tel int }
	shards  []*scaleShard
	single  string // base URL of the single gateway's API
	prom    string
	agents  []string // agents' telemetry base URLs
	hostsMu sync.Mutex
}

type scaleShard struct {
	ip   string
	name string // its ring name, ip:otlp
	api  string // base URL
	p    *proc
	runs int
	// sinks: the file each run of the shard writes its logs to, the
	// state changes among them, read when a check fails.
	sinks []string
}

func TestScaleShards(t *testing.T) {
	// Alone, in the suite's sequential part: beside the parallel scenarios
	// it failed clean CI runs of the merged wave on 2 cores (issue 19).
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the scale test needs root (a mount namespace per collector)")
		}
		t.Skip("needs root: the tier's collectors run in a mount namespace with the test's /etc/hosts")
	}
	unshare := need(t, "unshare", "/usr/bin/unshare")
	simBin := need(t, "workersim", filepath.Join(binDir, "workersim"))
	promBin := need(t, "prometheus", "/usr/bin/prometheus")
	tr := &scaleTier{t: t, bin: collectorBinary(t), tmp: t.TempDir()}
	tr.hosts = filepath.Join(tr.tmp, "hosts")
	ips := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}
	tr.ports.otlp, tr.ports.api, tr.ports.prom, tr.ports.tel = freePortOn(t, ips), freePortOn(t, ips), freePortOn(t, ips), freePortOn(t, ips)
	for _, ip := range ips {
		tr.shards = append(tr.shards, &scaleShard{
			ip: ip, name: fmt.Sprintf("%s:%d", ip, tr.ports.otlp),
			api: fmt.Sprintf("http://%s:%d", ip, tr.ports.api),
		})
	}
	tr.writeHosts(tr.shards...)

	// The single gateway the tier is compared with.
	singleOTLP, singleAPI := freeport.Addr(t), freeport.Addr(t)
	tr.single = "http://" + singleAPI
	single := start(t, "scale-single", []string{
		"WORKERWATCH_SELF=" + singleOTLP, "WORKERWATCH_OTLP_GRPC=" + singleOTLP, "WORKERWATCH_API=" + singleAPI,
		"WORKERWATCH_PROMETHEUS=" + freeport.Addr(t), "WORKERWATCH_TELEMETRY_HOST=127.0.0.1",
		fmt.Sprintf("WORKERWATCH_TELEMETRY_PORT=%d", freeport.Port(t)), "WORKERWATCH_STATE_DIR=" + filepath.Join(tr.tmp, "single"),
		"TRACES_ENDPOINT=127.0.0.1:1", "LOGS_ENDPOINT=http://127.0.0.1:1",
	}, tr.bin, "--config", deployConfig("gateway-static.yaml"), "--config", deployConfig("prometheus-exporter.overlay.yaml"),
		"--config", e2eConfig("scale-gateway.overlay.yaml"), "--config", e2eConfig("scale-single.overlay.yaml"))
	waitReady(t, single, singleAPI)

	for i := range tr.shards {
		tr.startShard(unshare, i)
	}

	// Prometheus scrapes the shards (not the single gateway: the shipped
	// rules would add it to the tier's figures) and loads the shipped rules.
	promWeb := freeport.Addr(t)
	tr.prom = "http://" + promWeb
	var targets []string
	for _, s := range tr.shards {
		targets = append(targets, fmt.Sprintf("%q", fmt.Sprintf("%s:%d", s.ip, tr.ports.prom)))
	}
	promCfg := filepath.Join(tr.tmp, "prometheus.yml")
	writeFile(t, promCfg, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: workerwatch-gateway
    static_configs:
      - targets: [%s]
`, filepath.Join(repoRoot, "deploy", "prometheus", "alerts.yaml"), strings.Join(targets, ", ")))
	prom := start(t, "scale-prometheus", nil, promBin, "--config.file="+promCfg,
		"--storage.tsdb.path="+filepath.Join(tr.tmp, "prom"), "--web.listen-address="+promWeb)
	waitListening(t, prom, promWeb)

	// Two agents, each watching the trees of half the workers (odd, even)
	// and receiving those workers' OTLP, as on two hosts; the scheduler
	// sends to the first.
	var agentHTTP []string
	for i, digits := range []string{"13579", "02468"} {
		grpcAddr, httpAddr, api, tel := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Port(t)
		agentHTTP = append(agentHTTP, httpAddr)
		name := fmt.Sprintf("scale-agent-%c", 'a'+i)
		tr.agents = append(tr.agents, fmt.Sprintf("http://127.0.0.1:%d", tel))
		a := start(t, name, []string{
			"WORKERWATCH_OTLP_GRPC=" + grpcAddr, "WORKERWATCH_OTLP_HTTP=" + httpAddr, "WORKERWATCH_API=" + api,
			"WORKERWATCH_STATE_DIR=" + filepath.Join(tr.tmp, name), "WORKERWATCH_SHARDS=" + shardsName,
			fmt.Sprintf("WORKERWATCH_SHARDS_PORT=%d", tr.ports.otlp), "WORKERWATCH_SYNC_INTERVAL=1s",
			"WORKERWATCH_TELEMETRY_HOST=127.0.0.1", fmt.Sprintf("WORKERWATCH_TELEMETRY_PORT=%d", tel),
			"K8S_NODE_NAME=" + name, "E2E_DIGITS=" + digits, "E2E_SINGLE=" + singleOTLP, "E2E_ID_PREFIX=" + runPrefix,
		}, unshare, tr.namespaced(deployConfig("agent-sharded.yaml"), e2eConfig("scale-agent.overlay.yaml"))...)
		waitReady(t, a, api)
	}

	fleetStart := time.Now()
	start(t, "scale-fleet", nil, simBin, "fleet", "--workers", strconv.Itoa(scaleWorkers), "--faults", scaleFaults, "--id-prefix", scaleIDPrefix,
		"--seed", "15", "--otlp-endpoint", strings.Join(agentHTTP, ","),
		// One slot per worker, runs of ~20 s, a little more work than the
		// fleet can do: work stays pending (the stall rule needs it) with
		// about 5 runs starting a second, not hundreds.
		"--capacity", "1", "--run-duration", "20s", "--run-rate", "6", "--max-pending", "100",
		"--run-memory", "1MiB", "--run-timeout", "60s", "--leak-bytes", "40MiB",
		"--export-interval", "2s", "--heartbeat-interval", "2s", "--poll-interval", "500ms")

	ids := make([]string, scaleWorkers)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", scaleIDPrefix, i+1)
	}
	one := tr.shards[0].api // provisional; fixed below, before the poller starts

	t.Run("every worker is judged by exactly one shard, as the single gateway judges it", func(t *testing.T) {
		eventually(t, boundJudged-time.Since(fleetStart), time.Second, "every worker judged by the tier", func() error {
			ws, err := fleetList(one)
			if err != nil {
				return err
			}
			return allJudged(ws, ids)
		})
		t.Logf("e2e: all %d workers judged %.1fs after the fleet started (bound %s)", scaleWorkers, time.Since(fleetStart).Seconds(), boundJudged)
		// Compare once the faults show, so that the verdicts differ from
		// worker to worker: leak unhealthy, hang stalled, drop-claims with
		// missing runs (at the single gateway; the tier must then agree).
		eventually(t, boundFaults-time.Since(fleetStart), time.Second, "the faults show at the single gateway", func() error {
			ws, err := fleetList(tr.single)
			if err != nil {
				return err
			}
			got := map[string]contract.Worker{}
			for _, w := range ws {
				got[w.ID] = w
			}
			if st := got[wScaleLeak].State; st != contract.Unhealthy {
				return fmt.Errorf("%s %s", wScaleLeak, st)
			}
			if st := got[wScaleHang].State; st != contract.Stalled {
				return fmt.Errorf("%s %s", wScaleHang, st)
			}
			if len(got[wScaleDrop].Drift.Missing()) == 0 {
				return fmt.Errorf("%s has no missing run yet", wScaleDrop)
			}
			return nil
		})
		tr.requireOneOwnerEach(t, ids, tr.shards)
		tr.requireSameVerdicts(t, one, "steady state")
		tr.requireCountedOnce(t, ids)
	})
	if t.Failed() {
		return
	}

	// The shard to kill owns neither drift worker (a worker that moves
	// keeps only the drift its new owner sees from then on: docs/scaling.md);
	// the scheduler asks another shard.
	owners := map[string]bool{ownerOf(t, one, wScaleDrop): true, ownerOf(t, one, wScaleOrph): true}
	victim := -1
	for i, s := range tr.shards {
		if !owners[s.name] {
			victim = i
			break
		}
	}
	asked := tr.shards[(victim+1)%len(tr.shards)]
	one = asked.api
	t.Logf("e2e: the scheduler asks %s; the shard to kill is %s", asked.name, tr.shards[victim].name)

	poll := startScheduler(one, ids)
	defer poll.stop()

	var killedAt, droppedAt, returnedAt, backAt time.Time
	var moved []string
	t.Run("SIGKILL one shard: agents queue, then the survivors judge its workers", func(t *testing.T) {
		v := tr.shards[victim]
		moved = localIDs(t, v.api)
		if len(moved) == 0 {
			t.Fatalf("%s owns no worker", v.name)
		}
		killedAt = time.Now()
		if err := syscall.Kill(v.p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-v.p.done
		// While the name still lists it (as a Service does until the pod is
		// seen not ready), the agents' sends to it fail and are retried from
		// their persistent queue, never dropped (checked at the end).
		eventually(t, 30*time.Second, 200*time.Millisecond, "the agents' sends to the dead shard fail", func() error {
			for _, a := range tr.agents {
				if n, _ := agentMetric(a, "otelcol_loadbalancer_backend_outcome", `success="false"`, `endpoint="`+v.name+`"`); n > 0 {
					return nil
				}
			}
			return fmt.Errorf("no failed send to %s yet", v.name)
		})
		time.Sleep(3 * time.Second) // a few more failed probes' worth
		droppedAt = time.Now()
		tr.writeHosts(tr.liveShards()...)
		eventually(t, boundMove, time.Second, "the moved workers judged by the survivors", func() error {
			return tr.judgedElsewhere(one, moved, v.name)
		})
		t.Logf("e2e: %d workers of %s judged by the survivors %.1fs after the name dropped it (bound %s; killed %.1fs before)",
			len(moved), v.name, time.Since(droppedAt).Seconds(), boundMove, droppedAt.Sub(killedAt).Seconds())
		tr.requireBackends(t, 2)
		tr.requireOneOwnerEach(t, ids, tr.liveShards())
		tr.requireSameVerdicts(t, one, "after the shard died")
	})
	if t.Failed() {
		return
	}

	t.Run("the shard back: its workers return to it, each counted once", func(t *testing.T) {
		unshare := need(t, "unshare", "/usr/bin/unshare")
		v := tr.shards[victim]
		tr.startShard(unshare, victim)
		returnedAt = time.Now()
		tr.writeHosts(tr.shards...)
		backAt = time.Now()
		eventually(t, boundMove, time.Second, "workers back on the returned shard", func() error {
			mine := localIDs(t, v.api)
			if len(mine) == 0 {
				return fmt.Errorf("%s owns nothing yet", v.name)
			}
			return tr.judgedBy(one, mine, v.name)
		})
		t.Logf("e2e: workers back on %s %.1fs after the name listed it again (bound %s)", v.name, time.Since(backAt).Seconds(), boundMove)
		tr.requireBackends(t, 3)
		tr.requireOneOwnerEach(t, ids, tr.shards)
		tr.requireSameVerdicts(t, one, "after the shard came back")
		tr.requireCountedOnce(t, ids)
	})

	t.Run("a scheduler asking one shard got the right answer for every worker all along", func(t *testing.T) {
		answers := poll.stop()
		if len(answers) < 10*scaleWorkers {
			t.Fatalf("only %d answers", len(answers))
		}
		moving, unreachable, slowOwner := 0, 0, 0
		for _, a := range answers {
			if a.err != "" {
				t.Errorf("%s at %s: %s", a.id, a.at.Format(time.TimeOnly), a.err)
				continue
			}
			switch {
			case a.code == http.StatusNotFound:
				t.Errorf("%s: 404 at %s (a known worker)", a.id, a.at.Format(time.TimeOnly))
			case a.code != http.StatusOK && a.code != http.StatusServiceUnavailable:
				t.Errorf("%s: HTTP %d at %s", a.id, a.code, a.at.Format(time.TimeOnly))
			case (a.code == http.StatusOK) != a.state.MayTakeWork():
				t.Errorf("%s: HTTP %d with state %s", a.id, a.code, a.state)
			case a.state == contract.Lost:
				t.Errorf("%s: lost at %s (every worker is alive)", a.id, a.at.Format(time.TimeOnly))
			case a.state == contract.Unknown:
				inWindow := (a.at.After(killedAt) && a.at.Before(droppedAt.Add(boundMove))) ||
					(a.at.After(returnedAt) && a.at.Before(backAt.Add(boundMove)))
				switch {
				case inWindow && (a.reason == contract.ReasonMoving || a.reason == contract.ReasonOwnerUnreachable || a.reason == "no_telemetry_since_start"):
					switch a.reason {
					case contract.ReasonMoving:
						moving++
					case contract.ReasonOwnerUnreachable:
						unreachable++
					}
				case hopTimedOut(a):
					// The owner is alive and on the ring but did not answer
					// the asked shard's hop within cluster.client.timeout:
					// on a loaded 2-core machine (both cores busy with the
					// suite's other scenarios) a collector can wait that
					// long for a CPU. `owner_unreachable` (503, do not
					// assign work) is then the documented answer, not a
					// wrong one (docs/http-api.md); it is counted and
					// logged. Any other unknown outside a ring change, an
					// `owner_unreachable` that came sooner than the hop's
					// timeout included (a live owner refused), fails.
					slowOwner++
					t.Logf("e2e: %s: owner_unreachable at %s outside a ring change after %s (the hop timed out: %s)",
						a.id, a.at.Format(time.TimeOnly), a.took.Round(time.Millisecond), a.msg)
				default:
					t.Errorf("%s: unknown (%s: %s) at %s after %s, outside a ring change", a.id, a.reason, a.msg,
						a.at.Format(time.TimeOnly), a.took.Round(time.Millisecond))
				}
			}
		}
		var slowest time.Duration
		for _, a := range answers {
			slowest = max(slowest, a.took)
		}
		t.Logf("e2e: %d answers from %s (slowest %s); %d `moving`, %d `owner_unreachable` within the ring changes; %d hops timed out (%s) outside them",
			len(answers), asked.name, slowest.Round(time.Millisecond), moving, unreachable, slowOwner, clusterHopTimeout)
	})

	t.Run("no worker was ever lost, and the fleet figures add up once", func(t *testing.T) {
		span := int(time.Since(fleetStart).Seconds()) + 1
		lost := fmt.Sprintf(`max_over_time(workerwatch_worker_state_ratio{workerwatch_worker_state="lost"}[%ds])`, span)
		s, err := promQuery(tr.prom, lost)
		if err != nil || len(s) < scaleWorkers {
			t.Fatalf("%s: %d series (%v): the query names what the shards export", lost, len(s), err)
		}
		for _, x := range s {
			if x.float() != 0 {
				t.Errorf("lost in Prometheus: %v", x.Metric)
			}
		}
		if t.Failed() {
			// When and why, from the shards' own state-change records, on
			// the test's clock.
			t.Logf("e2e: fleet started %s; shard killed +%.1fs, dropped from the name +%.1fs, restarted +%.1fs, listed again +%.1fs",
				fleetStart.Format(time.TimeOnly), killedAt.Sub(fleetStart).Seconds(), droppedAt.Sub(fleetStart).Seconds(),
				returnedAt.Sub(fleetStart).Seconds(), backAt.Sub(fleetStart).Seconds())
			for _, sh := range tr.shards {
				for _, f := range sh.sinks {
					for _, c := range stateChanges(t, f, contract.Lost) {
						t.Logf("e2e: %s (%s): +%.1fs %s", sh.name, filepath.Base(f), c.at.Sub(fleetStart).Seconds(), c.body)
					}
				}
			}
		}
		// The shard that owns the empty id exports it; after a ring change
		// the former owner's series expires with metric_expiration.
		eventually(t, 30*time.Second, time.Second, "the scheduler's pending count exported by one shard", func() error {
			s, err := promQuery(tr.prom, `count(workerwatch_fleet_runs_pending)`)
			if err == nil && (len(s) != 1 || s[0].float() != 1) {
				err = fmt.Errorf("%v", s)
			}
			return err
		})
		// Nothing the agents accepted was given up: not refused by a full
		// queue, not dropped after retries.
		for _, a := range tr.agents {
			for _, m := range []string{"enqueue_failed", "send_failed"} {
				for _, sig := range []string{"log_records", "metric_points", "spans"} {
					name := "otelcol_exporter_" + m + "_" + sig
					if v, _ := agentMetric(a, name, `exporter="load_balancing"`); v != 0 {
						t.Errorf("%s: %s = %v: records were dropped", a, name, v)
					}
				}
			}
		}
	})
}

// startShard starts shard i in its mount namespace and waits for /readyz.
func (tr *scaleTier) startShard(unshare string, i int) {
	s := tr.shards[i]
	s.runs++
	name := fmt.Sprintf("scale-shard-%c", 'a'+i)
	if s.runs > 1 {
		name += fmt.Sprintf("-run%d", s.runs)
	}
	sink := filepath.Join(tr.tmp, name+"-logs.jsonl")
	s.sinks = append(s.sinks, sink)
	s.p = start(tr.t, name, []string{
		"E2E_SINK=" + sink,
		"WORKERWATCH_SELF=" + s.name, "WORKERWATCH_OTLP_GRPC=" + s.name,
		fmt.Sprintf("WORKERWATCH_API=%s:%d", s.ip, tr.ports.api), fmt.Sprintf("WORKERWATCH_API_PORT=%d", tr.ports.api),
		"WORKERWATCH_SHARDS=" + shardsName, fmt.Sprintf("WORKERWATCH_SHARDS_PORT=%d", tr.ports.otlp),
		fmt.Sprintf("WORKERWATCH_PROMETHEUS=%s:%d", s.ip, tr.ports.prom),
		"WORKERWATCH_TELEMETRY_HOST=" + s.ip, fmt.Sprintf("WORKERWATCH_TELEMETRY_PORT=%d", tr.ports.tel),
		"WORKERWATCH_SYNC_INTERVAL=1s", "TRACES_ENDPOINT=127.0.0.1:1", "LOGS_ENDPOINT=http://127.0.0.1:1",
	}, unshare, append(tr.namespaced(deployConfig("gateway.yaml"), deployConfig("prometheus-exporter.overlay.yaml"), e2eConfig("scale-gateway.overlay.yaml")),
		"--set=extensions::worker_health::cluster::client::timeout="+clusterHopTimeout.String())...)
	waitReady(tr.t, s.p, strings.TrimPrefix(s.api, "http://"))
}

// namespaced is the command line that runs the collector with these configs
// in a new mount namespace whose /etc/hosts is the test's file: unshare,
// then a shell that bind-mounts the file and execs the collector (same pid).
func (tr *scaleTier) namespaced(configs ...string) []string {
	args := []string{
		"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount --bind "$0" /etc/hosts && exec "$@"`, tr.hosts, tr.bin,
	}
	for _, c := range configs {
		args = append(args, "--config", c)
	}
	return args
}

// writeHosts rewrites the test's /etc/hosts in place (the bind mounts see
// the same inode): the shards' name resolves to these shards.
func (tr *scaleTier) writeHosts(shards ...*scaleShard) {
	tr.hostsMu.Lock()
	defer tr.hostsMu.Unlock()
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for _, s := range shards {
		fmt.Fprintf(&b, "%s %s\n", s.ip, shardsName)
	}
	f, err := os.OpenFile(tr.hosts, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		tr.t.Fatal(err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		tr.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *scaleTier) liveShards() []*scaleShard {
	var out []*scaleShard
	for _, s := range tr.shards {
		if s.p != nil && !s.p.exited() {
			out = append(out, s)
		}
	}
	return out
}

// requireOneOwnerEach: the shards' own lists (?scope=local) are disjoint and
// together hold every worker, once the ring has settled.
func (tr *scaleTier) requireOneOwnerEach(t *testing.T, ids []string, shards []*scaleShard) {
	t.Helper()
	eventually(t, boundMove, time.Second, "each worker on exactly one shard", func() error {
		seen := map[string]string{}
		for _, s := range shards {
			ws, err := listWorkers(s.api + "/health/workers?scope=local")
			if err != nil {
				return err
			}
			for _, w := range ws {
				if prev, dup := seen[w.ID]; dup {
					return fmt.Errorf("%s judged by %s and %s", w.ID, prev, s.name)
				}
				seen[w.ID] = s.name
			}
		}
		var missing []string
		for _, id := range ids {
			if seen[id] == "" {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 || len(seen) != len(ids) {
			return fmt.Errorf("%d workers on the shards, missing %v", len(seen), missing)
		}
		return nil
	})
}

// requireSameVerdicts: at some moment within boundEqual, the tier (asked
// at one shard) and the single gateway give every worker the same state
// and the same missing and orphaned runs.
func (tr *scaleTier) requireSameVerdicts(t *testing.T, one, when string) {
	t.Helper()
	start := time.Now()
	var lastDiff error
	eventually(t, boundEqual, time.Second, "the tier's verdicts equal the single gateway's ("+when+")", func() error {
		a, err := fleetList(one)
		if err != nil {
			return err
		}
		b, err := fleetList(tr.single)
		if err != nil {
			return err
		}
		err = sameVerdicts(a, b)
		if err != nil {
			lastDiff = err
		}
		return err
	})
	if lastDiff != nil {
		t.Logf("e2e: %s: the last difference before they agreed: %v", when, lastDiff)
	}
	a, _ := fleetList(one)
	states := map[contract.State]int{}
	drift := 0
	for _, w := range a {
		states[w.State]++
		drift += len(w.Drift.Missing()) + len(w.Drift.Orphaned())
	}
	t.Logf("e2e: %s: %d verdicts equal the single gateway's after %.1fs: %v, %d runs in drift", when, len(a), time.Since(start).Seconds(), states, drift)
}

// requireCountedOnce: in Prometheus, one state series per worker at 1 and
// the fleet gauge adding up to the fleet.
func (tr *scaleTier) requireCountedOnce(t *testing.T, ids []string) {
	t.Helper()
	eventually(t, 60*time.Second, time.Second, "each worker counted once in Prometheus", func() error {
		s, err := promQuery(tr.prom, `count by (cicd_worker_id) (workerwatch_worker_state_ratio == 1)`)
		if err != nil {
			return err
		}
		if len(s) != len(ids) {
			return fmt.Errorf("%d workers with a state, want %d", len(s), len(ids))
		}
		for _, x := range s {
			if x.float() != 1 {
				return fmt.Errorf("%s has %v current states", x.Metric["cicd_worker_id"], x.float())
			}
		}
		s, err = promQuery(tr.prom, `sum(workerwatch_fleet_workers)`)
		if err != nil || len(s) != 1 {
			return fmt.Errorf("sum(workerwatch_fleet_workers): %v %v", s, err)
		}
		if s[0].float() != float64(len(ids)) {
			return fmt.Errorf("sum(workerwatch_fleet_workers) = %v, want %d", s[0].float(), len(ids))
		}
		return nil
	})
}

// requireBackends: both agents' exporters route to n shards.
func (tr *scaleTier) requireBackends(t *testing.T, n int) {
	t.Helper()
	eventually(t, 30*time.Second, 500*time.Millisecond, fmt.Sprintf("the agents route to %d shards", n), func() error {
		for _, a := range tr.agents {
			if v, ok := agentMetric(a, "otelcol_loadbalancer_num_backends", `resolver="dns"`); !ok || v != float64(n) {
				return fmt.Errorf("%s: %v backends", a, v)
			}
		}
		return nil
	})
}

// judgedElsewhere: every id answers with a real verdict from a shard other
// than gone.
func (tr *scaleTier) judgedElsewhere(one string, ids []string, gone string) error {
	for _, id := range ids {
		w, shard, err := askWorker(one, id)
		if err != nil {
			return err
		}
		if shard == gone || w.State == contract.Unknown {
			return fmt.Errorf("%s: %s from %s", id, w.State, shard)
		}
	}
	return nil
}

// judgedBy: every id answers with a real verdict from shard.
func (tr *scaleTier) judgedBy(one string, ids []string, shard string) error {
	for _, id := range ids {
		w, s, err := askWorker(one, id)
		if err != nil {
			return err
		}
		if s != shard || w.State == contract.Unknown {
			return fmt.Errorf("%s: %s from %s", id, w.State, s)
		}
	}
	return nil
}

func askWorker(base, id string) (contract.Worker, string, error) {
	var w contract.Worker
	resp, err := httpClient.Get(base + "/health/workers/" + url.PathEscape(id))
	if err != nil {
		return w, "", err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		return w, "", fmt.Errorf("%s: HTTP %d: %w", id, resp.StatusCode, err)
	}
	return w, resp.Header.Get(contract.HeaderShard), nil
}

func ownerOf(t *testing.T, base, id string) string {
	t.Helper()
	_, shard, err := askWorker(base, id)
	if err != nil || shard == "" {
		t.Fatalf("owner of %s: %q %v", id, shard, err)
	}
	return shard
}

func localIDs(t *testing.T, base string) []string {
	t.Helper()
	ws, err := listWorkers(base + "/health/workers?scope=local")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(ws))
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	return ids
}

func listWorkers(u string) ([]contract.Worker, error) {
	var list struct {
		Workers []contract.Worker `json:"workers"`
		Sources []struct {
			ID    string `json:"id"`
			Error string `json:"error"`
		} `json:"sources"`
	}
	code, err := getJSON(u, &list)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d", u, code)
	}
	for _, s := range list.Sources {
		if s.Error != "" {
			return nil, fmt.Errorf("GET %s: shard %s: %s", u, s.ID, s.Error)
		}
	}
	return list.Workers, nil
}

func fleetList(base string) ([]contract.Worker, error) { return listWorkers(base + "/health/workers") }

// allJudged: every id listed with a state other than unknown.
func allJudged(ws []contract.Worker, ids []string) error {
	got := map[string]contract.State{}
	for _, w := range ws {
		got[w.ID] = w.State
	}
	var pending []string
	for _, id := range ids {
		if st, ok := got[id]; !ok || st == contract.Unknown {
			pending = append(pending, id)
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("%d workers not judged yet, e.g. %v", len(pending), pending[:min(5, len(pending))])
	}
	return nil
}

// sameVerdicts compares state, missing and orphaned runs per worker.
func sameVerdicts(a, b []contract.Worker) error {
	bm := map[string]contract.Worker{}
	for _, w := range b {
		bm[w.ID] = w
	}
	var diffs []string
	for _, w := range a {
		o, ok := bm[w.ID]
		switch {
		case !ok:
			diffs = append(diffs, w.ID+": not at the single gateway")
		case w.State != o.State:
			diffs = append(diffs, fmt.Sprintf("%s: %s vs %s", w.ID, w.State, o.State))
		case !slices.Equal(w.Drift.Missing(), o.Drift.Missing()) || !slices.Equal(w.Drift.Orphaned(), o.Drift.Orphaned()):
			diffs = append(diffs, fmt.Sprintf("%s: drift %v/%v vs %v/%v", w.ID, w.Drift.Missing(), w.Drift.Orphaned(), o.Drift.Missing(), o.Drift.Orphaned()))
		}
	}
	if len(a) != len(b) {
		diffs = append(diffs, fmt.Sprintf("%d workers vs %d", len(a), len(b)))
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return fmt.Errorf("%d differences, e.g. %v", len(diffs), diffs[:min(4, len(diffs))])
	}
	return nil
}

// agentMetric sums a metric of an agent's own telemetry.
func agentMetric(base, name string, match ...string) (float64, bool) {
	text, err := httpGet(base + "/metrics")
	if err != nil {
		return 0, false
	}
	return metricSum(text, name, match...)
}

// freePortOn is a TCP port free on every one of these loopback addresses.
func freePortOn(t *testing.T, ips []string) int {
	t.Helper()
	for range 50 {
		port := freeport.Port(t)
		ok := true
		var ls []net.Listener
		for _, ip := range ips {
			l2, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, port))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l2)
		}
		for _, x := range ls {
			_ = x.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every shard address")
	return 0
}

func deployConfig(name string) string { return filepath.Join(repoRoot, "deploy", "collector", name) }
func e2eConfig(name string) string    { return filepath.Join(repoRoot, "e2e", "testdata", name) }

// clusterHopTimeout is the shards' cluster.client.timeout, set with --set:
// the extension's default (gateway.yaml sets none) is 2 s, and beside the
// suite's other scenarios (the slow clients' thousands of connections) a
// live shard's fleet list took longer than that for a whole 90 s check in a
// clean CI run. A hop that slow is owner_unreachable, as documented; this
// test is about who owns what, so it waits 5 s (under the test client's 10 s).
const clusterHopTimeout = 5 * time.Second

// hopTimedOut reports whether an answer is the asked shard's
// `owner_unreachable` for a hop to the owner that hit cluster.client.timeout:
// Go's client timeout in the message, and the answer no sooner than that
// timeout after the request.
func hopTimedOut(a answer) bool {
	return a.code == http.StatusServiceUnavailable && a.reason == contract.ReasonOwnerUnreachable &&
		strings.Contains(a.msg, "Client.Timeout exceeded") && a.took >= clusterHopTimeout
}

// answer is one answer the polling scheduler got.
type answer struct {
	// at is when the answer came: a request sent just before a shard was
	// killed is answered `owner_unreachable` after it, inside the window.
	at     time.Time
	took   time.Duration // from the request sent to the answer read
	id     string
	code   int
	state  contract.State
	reason string
	msg    string // the first reason's message
	err    string
}

// scheduler asks one address for every worker, round after round, as a
// scheduler polls before assigning work.
type scheduler struct {
	mu      sync.Mutex
	answers []answer
	done    chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

func startScheduler(base string, ids []string) *scheduler {
	s := &scheduler{done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			for _, id := range ids {
				select {
				case <-s.done:
					return
				default:
				}
				a := answer{id: id}
				sent := time.Now()
				resp, err := httpClient.Get(base + "/health/workers/" + url.PathEscape(id))
				a.at = time.Now()
				if err != nil {
					a.err = err.Error()
				} else {
					var w contract.Worker
					a.code = resp.StatusCode
					if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
						a.err = err.Error()
					}
					resp.Body.Close()
					a.state = w.State
					if len(w.Reasons) > 0 {
						a.reason, a.msg = w.Reasons[0].Code, w.Reasons[0].Message
					}
				}
				a.took = a.at.Sub(sent)
				s.mu.Lock()
				s.answers = append(s.answers, a)
				s.mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return s
}

func (s *scheduler) stop() []answer {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers
}

type stateChange struct {
	at   time.Time
	body string // "worker ID: FROM -> TO (codes)", then each reason's message
}

// stateChanges reads the state-change log records to the given state from a
// file exporter's output (a partly written last line is skipped).
func stateChanges(t *testing.T, file string, to contract.State) []stateChange {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Logf("e2e: %v", err)
		return nil
	}
	var out []stateChange
	var u plog.JSONUnmarshaler
	for _, line := range bytes.Split(raw, []byte("\n")) {
		ld, err := u.UnmarshalLogs(line)
		if err != nil {
			continue
		}
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			sl := ld.ResourceLogs().At(i).ScopeLogs()
			for j := 0; j < sl.Len(); j++ {
				lrs := sl.At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					lr := lrs.At(k)
					if lr.EventName() != contract.EventStateChange {
						continue
					}
					if v, ok := lr.Attributes().Get(contract.AttrStateTo); !ok || v.Str() != string(to) {
						continue
					}
					body := lr.Body().Str()
					if rs, ok := lr.Attributes().Get(contract.AttrReasons); ok {
						body += " " + rs.AsString()
					}
					out = append(out, stateChange{at: lr.Timestamp().AsTime(), body: body})
				}
			}
		}
	}
	return out
}
