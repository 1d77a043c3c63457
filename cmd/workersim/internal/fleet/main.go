//go:build linux

package fleet

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/scheduler"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/telemetry"
)

// Main runs `workersim fleet`.
func Main(args []string) int {
	const name = "fleet"
	fs := cli.NewFlagSet(name)
	var (
		workers       = fs.Int("workers", 6, "number of worker processes")
		faults        = fs.String("faults", "", "comma list of faults applied to workers in order (leak, hang, drop-claims, orphan, timeout, oom, busy, none); missing entries are none")
		view          = fs.String("scheduler-view", "events", "how the scheduler states what it holds: events, claims_only or snapshots")
		snapEvery     = fs.Duration("snapshot-interval", 2*time.Second, "snapshots view: how often the scheduler states every run it holds per worker")
		dialect       = fs.String("dialect", "conventions", "names every process speaks: conventions (workerwatch's) or openfn")
		busy          = fs.Float64("busy-fraction", 0.5, "busy: share of one core a busy worker's main process burns")
		seed          = fs.Uint64("seed", 0, "seed for run ids, sizes and jitter (0: from the clock, printed)")
		endpoint      = fs.String("otlp-endpoint", "127.0.0.1:4318", "OTLP/HTTP endpoint (host:port or URL) for every process, or a comma list: the scheduler uses the first, the workers each in turn; empty disables export")
		schedAddr     = fs.String("scheduler-addr", "127.0.0.1:0", "scheduler API address (port 0 picks a free one)")
		capacity      = fs.Int("capacity", 2, "runs each worker holds at once")
		runMemory     = cli.Bytes(20 << 20)
		runDuration   = fs.Duration("run-duration", 2*time.Second, "mean run duration (+-25% jitter)")
		runRate       = fs.Float64("run-rate", 2, "runs enqueued per second")
		maxPending    = fs.Int("max-pending", 200, "the scheduler stops enqueuing at this many pending runs")
		claimTimeout  = fs.Duration("claim-timeout", 10*time.Second, "the scheduler rolls back a claim whose start is not acknowledged within this")
		lostTimeout   = fs.Duration("lost-timeout", 5*time.Minute, "the scheduler rolls back a dropped claim, or a started run never completed, after this")
		dropEvery     = fs.Int("drop-every", 2, "drop-claims: drop every Nth claim response")
		pidDir        = fs.String("pid-dir", "", "write <worker-id>.pid here for every worker (optional)")
		idPrefix      = fs.String("id-prefix", "worker-", "worker ids are <prefix>1..N")
		runTimeout    = fs.Duration("run-timeout", 5*time.Second, "workers kill a run (SIGTERM) after this; the timeout fault's runs outlive it")
		memLimit      = cli.Bytes(100 << 20)
		leakBytes     = cli.Bytes(30 << 20)
		leakMax       = cli.Bytes(1 << 30)
		hangAfter     = fs.Int("hang-after", 1, "hang: runs a hung worker claims before it stops claiming (0: never claims)")
		ackDelay      = fs.Duration("ack-delay", 0, "orphan: delay before the start acknowledgement (0: claim-timeout + 2s)")
		pollInterval  = fs.Duration("poll-interval", 250*time.Millisecond, "how often a worker with free capacity claims")
		heartbeat     = fs.Duration("heartbeat-interval", time.Second, "worker heartbeat interval")
		exportPeriod  = fs.Duration("export-interval", time.Second, "metric export interval and log/span batch timeout")
		shutdownAfter = fs.Duration("shutdown-timeout", 10*time.Second, "after a stop signal, SIGKILL what is still running after this")
	)
	fs.Var(&runMemory, "run-memory", "mean memory a run's child allocates and touches (+-25% jitter)")
	fs.Var(&memLimit, "run-memory-limit", "workers kill a run (SIGKILL) whose RSS exceeds this; the oom fault's runs exceed it")
	fs.Var(&leakBytes, "leak-bytes", "leak: bytes a leaking worker's main process retains per run")
	fs.Var(&leakMax, "leak-max", "leak: a leaking worker stops growing at this total")
	if code, ok := cli.Parse(fs, args); !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		cli.Failf(name, format, a...)
		return cli.ExitUsage
	}
	switch {
	case *workers < 1 || *workers > 1000:
		return fail("--workers must be between 1 and 1000, got %d", *workers)
	case *capacity < 1:
		return fail("--capacity must be >= 1, got %d", *capacity)
	case *runDuration <= 0:
		return fail("--run-duration must be > 0, got %s", *runDuration)
	case *runRate < 0:
		return fail("--run-rate must be >= 0, got %g", *runRate)
	case *claimTimeout <= 0:
		return fail("--claim-timeout must be > 0, got %s", *claimTimeout)
	case *lostTimeout <= 0:
		return fail("--lost-timeout must be > 0, got %s", *lostTimeout)
	case *runTimeout <= 0:
		return fail("--run-timeout must be > 0, got %s", *runTimeout)
	case *dropEvery < 1:
		return fail("--drop-every must be >= 1, got %d", *dropEvery)
	case *hangAfter < 0:
		return fail("--hang-after must be >= 0, got %d", *hangAfter)
	case *idPrefix == "" || strings.ContainsAny(*idPrefix, " \t/"):
		return fail("--id-prefix must be non-empty without spaces or '/', got %q", *idPrefix)
	case *pollInterval <= 0 || *heartbeat <= 0 || *exportPeriod <= 0 || *shutdownAfter <= 0:
		return fail("--poll-interval, --heartbeat-interval, --export-interval and --shutdown-timeout must be > 0")
	}
	faultList, err := cli.ParseFaults(*faults, *workers)
	if err != nil {
		return fail("--faults: %v", err)
	}
	if _, err := scheduler.ParseView(*view); err != nil {
		return fail("--scheduler-view: %v", err)
	}
	if _, err := telemetry.ParseDialect(*dialect); err != nil {
		return fail("--dialect: %v", err)
	}
	if *snapEvery <= 0 {
		return fail("--snapshot-interval must be > 0, got %s", *snapEvery)
	}
	if !(*busy > 0 && *busy <= 1) {
		return fail("--busy-fraction must be in (0, 1], got %g", *busy)
	}
	if *pidDir != "" {
		if err := os.MkdirAll(*pidDir, 0o750); err != nil {
			return fail("--pid-dir: %v", err)
		}
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano()%1_000_000) + 1
		cli.Logf("fleet seed=%d", *seed)
	}
	if *ackDelay == 0 {
		*ackDelay = *claimTimeout + 2*time.Second
	}
	exe, err := os.Executable()
	if err != nil {
		cli.Failf(name, "cannot find own executable: %v", err)
		return cli.ExitError
	}

	var dropIDs []string
	for i, f := range faultList {
		if f == cli.FaultDropClaims {
			dropIDs = append(dropIDs, *idPrefix+strconv.Itoa(i+1))
		}
	}
	var endpoints []string
	for _, e := range strings.Split(*endpoint, ",") {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	schedEndpoint := ""
	if len(endpoints) > 0 {
		schedEndpoint = endpoints[0]
	}
	seedS, export := strconv.FormatUint(*seed, 10), exportPeriod.String()
	cfg := Config{
		Workers: *workers, Faults: faultList, IDPrefix: *idPrefix, PidDir: *pidDir,
		SchedulerAddr: *schedAddr, ShutdownTimeout: *shutdownAfter, Endpoints: endpoints,
		SchedulerArgs: []string{
			"--otlp-endpoint", schedEndpoint, "--seed", seedS,
			"--run-memory", strconv.FormatInt(int64(runMemory), 10), "--run-duration", runDuration.String(),
			"--run-rate", strconv.FormatFloat(*runRate, 'g', -1, 64), "--max-pending", strconv.Itoa(*maxPending),
			"--claim-timeout", claimTimeout.String(), "--lost-timeout", lostTimeout.String(),
			"--drop-claims", strings.Join(dropIDs, ","), "--drop-every", strconv.Itoa(*dropEvery),
			"--export-interval", export, "--view", *view, "--snapshot-interval", snapEvery.String(),
			"--dialect", *dialect,
		},
		WorkerArgs: []string{
			"--capacity", strconv.Itoa(*capacity), "--seed", seedS,
			"--run-timeout", runTimeout.String(), "--run-memory-limit", strconv.FormatInt(int64(memLimit), 10),
			"--leak-bytes", strconv.FormatInt(int64(leakBytes), 10), "--leak-max", strconv.FormatInt(int64(leakMax), 10),
			"--hang-after", strconv.Itoa(*hangAfter), "--ack-delay", ackDelay.String(),
			"--poll-interval", pollInterval.String(), "--heartbeat-interval", heartbeat.String(),
			"--export-interval", export, "--dialect", *dialect,
			"--busy-fraction", strconv.FormatFloat(*busy, 'g', -1, 64),
		},
	}
	return New(cfg, exe).Run()
}
