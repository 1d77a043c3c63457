//go:build linux

package worker

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/api"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/telemetry"
)

// EnvName is the environment variable that carries the worker id (OpenFn's
// WORKER_NAME); the worker_process receiver reads it from the main process.
const EnvName = "WORKER_NAME"

// Main runs `workersim worker --id ID`. It returns ExitRestart after
// SIGUSR1 and ExitOK after SIGTERM/SIGINT, in both cases once every run's
// child is dead and telemetry is flushed.
func Main(args []string) int {
	const name = "worker"
	fs := cli.NewFlagSet(name)
	var (
		id           = fs.String("id", "", "worker id (default: $WORKER_NAME)")
		scheduler    = fs.String("scheduler", "", "scheduler address, host:port or URL (required)")
		endpoint     = fs.String("otlp-endpoint", "127.0.0.1:4318", "OTLP/HTTP endpoint (host:port or URL); empty disables export")
		faultName    = fs.String("fault", "none", "fault: leak, hang, drop-claims, orphan, timeout, oom, busy or none")
		dialectName  = fs.String("dialect", "conventions", "names to speak: conventions (workerwatch's) or openfn")
		busy         = fs.Float64("busy-fraction", 0.5, "busy fault: share of one core the main process burns")
		capacity     = fs.Int("capacity", 2, "runs held at once")
		seed         = fs.Uint64("seed", 1, "seed for jitter")
		runTimeout   = fs.Duration("run-timeout", 5*time.Second, "kill a run's child (SIGTERM) after this")
		memLimit     = cli.Bytes(100 << 20)
		leakBytes    = cli.Bytes(30 << 20)
		leakMax      = cli.Bytes(1 << 30)
		hangAfter    = fs.Int("hang-after", 1, "hang fault: runs claimed before the worker stops claiming")
		ackDelay     = fs.Duration("ack-delay", 12*time.Second, "orphan fault: delay before acknowledging a start (make it exceed the scheduler's claim timeout)")
		poll         = fs.Duration("poll-interval", 250*time.Millisecond, "how often to claim when capacity is free")
		heartbeat    = fs.Duration("heartbeat-interval", time.Second, "heartbeat event interval")
		exportPeriod = fs.Duration("export-interval", time.Second, "metric export interval and log/span batch timeout")
	)
	fs.Var(&memLimit, "run-memory-limit", "kill a run's child (SIGKILL) when its RSS exceeds this; 0 disables")
	fs.Var(&leakBytes, "leak-bytes", "leak fault: bytes the main process retains per run")
	fs.Var(&leakMax, "leak-max", "leak fault: stop leaking at this total")
	if code, ok := cli.Parse(fs, args); !ok {
		return code
	}
	fault, err := cli.ParseFault(*faultName)
	if err != nil {
		cli.Failf(name, "--fault: %v", err)
		return cli.ExitUsage
	}
	dialect, err := telemetry.ParseDialect(*dialectName)
	if err != nil {
		cli.Failf(name, "--dialect: %v", err)
		return cli.ExitUsage
	}
	if *id == "" {
		*id = os.Getenv(EnvName)
	}
	if env := os.Getenv(EnvName); env != "" && env != *id {
		// The receiver trusts the environment; say so when they disagree.
		cli.Logf("worker %s: warning: $%s is %q", *id, EnvName, env)
	}
	switch {
	case *id == "":
		cli.Failf(name, "--id is required (or set $%s)", EnvName)
		return cli.ExitUsage
	case *scheduler == "":
		cli.Failf(name, "--scheduler is required")
		return cli.ExitUsage
	case *capacity < 1:
		cli.Failf(name, "--capacity must be >= 1, got %d", *capacity)
		return cli.ExitUsage
	case *runTimeout <= 0 || *poll <= 0 || *heartbeat <= 0 || *exportPeriod <= 0:
		cli.Failf(name, "--run-timeout, --poll-interval, --heartbeat-interval and --export-interval must be > 0")
		return cli.ExitUsage
	case *hangAfter < 0:
		cli.Failf(name, "--hang-after must be >= 0, got %d", *hangAfter)
		return cli.ExitUsage
	case !(*busy > 0 && *busy <= 1):
		cli.Failf(name, "--busy-fraction must be in (0, 1], got %g", *busy)
		return cli.ExitUsage
	}
	exe, err := os.Executable()
	if err != nil {
		cli.Failf(name, "cannot find own executable: %v", err)
		return cli.ExitError
	}
	base := *scheduler
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}

	// Signals are caught before anything starts so none is lost.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	tel, err := telemetry.Setup(ctx, telemetry.Options{
		ServiceName: dialect.WorkerService,
		Endpoint:    *endpoint,
		Interval:    *exportPeriod,
		Attributes: []attribute.KeyValue{
			attribute.String(dialect.IDKey, *id),
			// New per process, so a restart is visible as a new instance.
			attribute.String("service.instance.id", fmt.Sprintf("%s-%d", *id, os.Getpid())),
		},
	})
	if err != nil {
		cli.Failf(name, "%v", err)
		return cli.ExitError
	}
	w := New(Config{
		ID: *id, Exe: exe, Fault: fault, Capacity: *capacity, Seed: *seed,
		Heartbeat: *heartbeat, Poll: *poll, RunTimeout: *runTimeout,
		RunMemoryLimit: int64(memLimit), LeakBytes: int64(leakBytes), LeakMax: int64(leakMax),
		HangAfter: *hangAfter, AckDelay: *ackDelay, Dialect: dialect, BusyFraction: *busy,
	}, api.NewClient(base), tel)

	var code atomic.Int32 // ExitOK unless SIGUSR1 asks for a restart
	go func() {
		if s := <-sigs; s == syscall.SIGUSR1 {
			code.Store(cli.ExitRestart)
		}
		cancel()
	}()
	runErr := w.Run(ctx)

	sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer scancel()
	_ = tel.Shutdown(sctx)
	if runErr != nil {
		cli.Failf(name, "%v", runErr)
		return cli.ExitError
	}
	return int(code.Load())
}
