package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/api"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/telemetry"
)

// Main runs `workersim scheduler`.
func Main(args []string) int {
	const name = "scheduler"
	fs := cli.NewFlagSet(name)
	var (
		addr         = fs.String("addr", "127.0.0.1:0", "address of the worker API (loopback; port 0 picks a free one)")
		listenFD     = fs.Int("listen-fd", 0, "serve on this inherited listening socket instead of --addr (the fleet passes 3)")
		endpoint     = fs.String("otlp-endpoint", "127.0.0.1:4318", "OTLP/HTTP endpoint (host:port or URL); empty disables export")
		seed         = fs.Uint64("seed", 1, "seed for run ids, sizes and durations")
		runMemory    = cli.Bytes(20 << 20)
		runDuration  = fs.Duration("run-duration", 2*time.Second, "mean run duration (+-25% jitter)")
		runRate      = fs.Float64("run-rate", 2, "runs enqueued per second (0: none)")
		maxPending   = fs.Int("max-pending", 200, "stop enqueuing at this many pending runs")
		claimTimeout = fs.Duration("claim-timeout", 10*time.Second, "roll back a claim whose start is not acknowledged within this")
		lostTimeout  = fs.Duration("lost-timeout", 5*time.Minute, "roll back a dropped claim, or a started run never completed, after this")
		dropClaims   = fs.String("drop-claims", "", "comma list of worker ids whose claim responses are dropped")
		dropEvery    = fs.Int("drop-every", 2, "drop every Nth non-empty claim response of a --drop-claims worker")
		interval     = fs.Duration("export-interval", time.Second, "metric export interval and log/span batch timeout")
		viewName     = fs.String("view", contract.ViewEvents, "how it states what it holds: events, claims_only or snapshots")
		snapEvery    = fs.Duration("snapshot-interval", 2*time.Second, "snapshots view: how often it states every run it holds per worker")
		dialectName  = fs.String("dialect", "conventions", "names to speak: conventions (workerwatch's) or openfn")
	)
	fs.Var(&runMemory, "run-memory", "mean memory per run (+-25% jitter), e.g. 20MiB")
	if code, ok := cli.Parse(fs, args); !ok {
		return code
	}
	switch {
	case *runDuration <= 0:
		cli.Failf(name, "--run-duration must be > 0, got %s", *runDuration)
		return cli.ExitUsage
	case *runRate < 0:
		cli.Failf(name, "--run-rate must be >= 0, got %g", *runRate)
		return cli.ExitUsage
	case *claimTimeout <= 0 || *lostTimeout <= 0:
		cli.Failf(name, "--claim-timeout and --lost-timeout must be > 0")
		return cli.ExitUsage
	case *dropEvery < 1:
		cli.Failf(name, "--drop-every must be >= 1, got %d", *dropEvery)
		return cli.ExitUsage
	case *interval <= 0:
		cli.Failf(name, "--export-interval must be > 0, got %s", *interval)
		return cli.ExitUsage
	case *snapEvery <= 0:
		cli.Failf(name, "--snapshot-interval must be > 0, got %s", *snapEvery)
		return cli.ExitUsage
	}
	view, err := ParseView(*viewName)
	if err != nil {
		cli.Failf(name, "--view: %v", err)
		return cli.ExitUsage
	}
	dialect, err := telemetry.ParseDialect(*dialectName)
	if err != nil {
		cli.Failf(name, "--dialect: %v", err)
		return cli.ExitUsage
	}
	drops := map[string]bool{}
	for _, id := range strings.Split(*dropClaims, ",") {
		if id = strings.TrimSpace(id); id != "" {
			drops[id] = true
		}
	}

	ln, err := listen(*addr, *listenFD)
	if err != nil {
		cli.Failf(name, "%v", err)
		return cli.ExitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: dialect.SchedulerService, Endpoint: *endpoint, Interval: *interval})
	if err != nil {
		cli.Failf(name, "%v", err)
		return cli.ExitError
	}
	st := New(Config{
		Seed: *seed, RunMemory: int64(runMemory), RunDuration: *runDuration, MaxPending: *maxPending,
		ClaimTimeout: *claimTimeout, LostTimeout: *lostTimeout, DropClaims: drops, DropEvery: *dropEvery,
	})
	if err := registerMetrics(tel.Meter, st); err != nil {
		cli.Failf(name, "metrics: %v", err)
		return cli.ExitError
	}
	sp := speaker{tel: tel, view: view, d: dialect}
	emit := func(events []Event) { sp.events(ctx, events) }

	srv := &http.Server{Handler: Handler(st, emit), ReadHeaderTimeout: 5 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if *listenFD == 0 {
		cli.Logf("scheduler listening on %s", ln.Addr())
	}

	var snapTick <-chan time.Time
	if view == contract.ViewSnapshots {
		t := time.NewTicker(*snapEvery)
		defer t.Stop()
		snapTick = t.C
	}
	code := loop(ctx, st, *runRate, emit, serveErr, snapTick, func() { sp.snapshot(ctx, st.Status()) })

	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	_ = tel.Shutdown(sctx)
	return code
}

// listen returns the inherited socket when the fleet passed one (no race
// between picking a free port and binding it), else binds addr.
func listen(addr string, fd int) (net.Listener, error) {
	if fd == 0 {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("--addr %s: %w", addr, err)
		}
		return ln, nil
	}
	f := os.NewFile(uintptr(fd), "listener")
	if f == nil {
		return nil, fmt.Errorf("--listen-fd %d: not an open file", fd)
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("--listen-fd %d: %w", fd, err)
	}
	return ln, nil
}

// loop generates runs at rate, expires claims and, in the snapshots view,
// states what it holds, until ctx ends.
func loop(ctx context.Context, st *State, rate float64, emit func([]Event), serveErr <-chan error, snapTick <-chan time.Time, snapshot func()) int {
	var gen <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		gen = t.C
	}
	expire := time.NewTicker(200 * time.Millisecond)
	defer expire.Stop()
	for {
		select {
		case <-ctx.Done():
			return cli.ExitOK
		case err := <-serveErr:
			if !errors.Is(err, http.ErrServerClosed) {
				cli.Failf("scheduler", "serve: %v", err)
				return cli.ExitError
			}
		case <-gen:
			st.Enqueue()
		case now := <-expire.C:
			emit(st.Expire(now))
		case <-snapTick:
			snapshot()
		}
	}
}

// ParseView checks a scheduler view name (contract.SchedulerViews).
func ParseView(v string) (string, error) {
	for _, x := range contract.SchedulerViews {
		if v == x {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown view %q (known: events, claims_only, snapshots)", v)
}

// speaker sends the scheduler's view in its shape (docs/conventions.md,
// "What a scheduler sends") and dialect.
type speaker struct {
	tel  *telemetry.Providers
	view string
	d    telemetry.Dialect
}

// events sends the lifecycle events the view carries: all of them in
// events, claims and rollbacks in claims_only (no run end), none in
// snapshots (the snapshot states what is held).
func (s speaker) events(ctx context.Context, events []Event) {
	for _, e := range events {
		name := e.Name
		switch {
		case s.view == contract.ViewSnapshots:
			continue
		case s.view == contract.ViewClaimsOnly && e.Name == contract.EventFinished:
			continue
		case e.Name == contract.EventClaimed:
			name = s.d.Claimed
		case e.Name == contract.EventFinished:
			name = s.d.Finished
		case e.Name == contract.EventReleased:
			name = s.d.SchedulerReleased
		}
		attrs := append([]attribute.KeyValue{
			attribute.String(s.d.IDKey, e.WorkerID),
			attribute.String(s.d.RunKey, e.RunID),
		}, e.Attrs...)
		verb := strings.TrimPrefix(e.Name, "workerwatch.run.") // contract.EventClaimed and its siblings
		// The scheduler's records are not about one worker's resource:
		// the worker is a record attribute (docs/conventions.md).
		s.tel.Emit(context.WithoutCancel(ctx), log.SeverityInfo, name, fmt.Sprintf("run %s %s (worker %s)", e.RunID, verb, e.WorkerID), attrs...)
	}
}

// snapshot states every run held, one record per worker it knows (an empty
// list for a worker that holds none).
func (s speaker) snapshot(ctx context.Context, st api.Status) {
	for w, runs := range st.Held {
		s.tel.Emit(context.WithoutCancel(ctx), log.SeverityInfo, contract.EventSchedulerSnapshot,
			fmt.Sprintf("worker %s holds %d runs", w, len(runs)),
			attribute.String(s.d.IDKey, w), attribute.StringSlice(contract.AttrSchedulerRuns, runs))
	}
}

func registerMetrics(m metric.Meter, st *State) error {
	pending, err := m.Int64ObservableGauge(contract.MetricSchedulerPending, metric.WithUnit(contract.UnitRuns),
		metric.WithDescription("Runs waiting for a worker."))
	if err != nil {
		return err
	}
	heldG, err := m.Int64ObservableGauge(contract.MetricSchedulerHeld, metric.WithUnit(contract.UnitRuns),
		metric.WithDescription("Runs the scheduler believes each worker holds."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		p, byWorker := st.Counts()
		o.ObserveInt64(pending, int64(p))
		for w, n := range byWorker {
			o.ObserveInt64(heldG, int64(n), metric.WithAttributes(attribute.String(contract.AttrWorkerID, w)))
		}
		return nil
	}, pending, heldG)
	return err
}
