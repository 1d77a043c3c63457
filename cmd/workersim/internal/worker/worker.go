//go:build linux

// Package worker is `workersim worker`: a job worker that claims runs from
// the scheduler, executes each in a forked child process, and reports what
// it does through OTLP the way docs/conventions.md asks. Its faults make it
// misbehave in the ways real workers do.
package worker

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/api"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/telemetry"
)

// Config is one worker's behavior.
type Config struct {
	ID        string
	Exe       string // this binary, re-executed as `run-child`
	Fault     cli.Fault
	Capacity  int
	Seed      uint64
	Heartbeat time.Duration
	Poll      time.Duration

	RunTimeout     time.Duration // a run's child is killed (SIGTERM) after this
	RunMemoryLimit int64         // a run's child is killed when its RSS exceeds this (0: off)
	LeakBytes      int64         // leak: bytes the main process keeps per run
	LeakMax        int64         // leak: stop growing here so a long demo cannot exhaust the host
	HangAfter      int           // hang: runs claimed before it stops claiming
	AckDelay       time.Duration // orphan: delay before acknowledging a start
	BusyFraction   float64       // busy: share of one core the main process burns

	// Dialect is the names the worker's telemetry speaks.
	Dialect telemetry.Dialect
}

// Worker is the running worker.
type Worker struct {
	cfg    Config
	client *api.Client
	tel    *telemetry.Providers
	warn   *cli.RateLimited

	wg sync.WaitGroup

	mu      sync.Mutex
	rng     *rand.Rand
	runs    map[string]bool // runs held now: claimed and not yet ended
	claimed int             // runs claimed since start
	leaks   [][]byte        // leak fault: retained, never freed
	leaked  int64
}

// New returns a worker; Run starts it.
func New(cfg Config, client *api.Client, tel *telemetry.Providers) *Worker {
	h := fnv.New64a()
	h.Write([]byte(cfg.ID))
	return &Worker{
		cfg:    cfg,
		client: client,
		tel:    tel,
		warn:   &cli.RateLimited{Prefix: "worker " + cfg.ID, Every: 30 * time.Second},
		rng:    rand.New(rand.NewPCG(cfg.Seed, h.Sum64())),
		runs:   map[string]bool{},
	}
}

// Run claims and executes runs until ctx ends, then kills every run's child,
// gives the runs back to the scheduler and returns.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.registerMetrics(); err != nil {
		return err
	}
	if w.cfg.Dialect.Heartbeat != "" {
		w.wg.Add(1)
		go w.heartbeat(ctx)
	}
	if w.cfg.Fault == cli.FaultBusy {
		w.wg.Add(1)
		go w.burn(ctx)
	}

	poll := time.NewTicker(w.cfg.Poll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			w.wg.Wait()
			return nil
		case <-poll.C:
			w.claim(ctx)
		}
	}
}

// claim asks for as many runs as there is free capacity. Only this loop adds
// runs, so the worker never holds more than its capacity.
func (w *Worker) claim(ctx context.Context) {
	w.mu.Lock()
	free := w.cfg.Capacity - len(w.runs)
	if w.cfg.Fault == cli.FaultHang {
		// A hung worker is alive and heartbeating but its claim loop is
		// stuck: the Taskcluster zombie.
		free = min(free, w.cfg.HangAfter-w.claimed)
	}
	w.mu.Unlock()
	if free <= 0 {
		return
	}
	runs, err := w.client.Claim(ctx, w.cfg.ID, free)
	if err != nil {
		if ctx.Err() == nil {
			w.warn.Printf("claim: %v", err)
		}
		return
	}
	for _, r := range runs {
		w.mu.Lock()
		w.runs[r.ID] = true
		w.claimed++
		w.mu.Unlock()
		d := &w.cfg.Dialect
		w.tel.Emit(context.Background(), log.SeverityInfo, d.Claimed, "run "+r.ID+" claimed",
			attribute.String(d.RunKey, r.ID), attribute.Int(d.CapacityKey, w.cfg.Capacity))
		w.wg.Add(1)
		go w.execute(ctx, r)
	}
}

func (w *Worker) forget(runID string) {
	w.mu.Lock()
	delete(w.runs, runID)
	w.mu.Unlock()
}

func (w *Worker) heartbeat(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		w.tel.Emit(ctx, log.SeverityInfo, w.cfg.Dialect.Heartbeat, "worker "+w.cfg.ID+" alive",
			attribute.Int(w.cfg.Dialect.CapacityKey, w.cfg.Capacity))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) registerMetrics() error {
	m := w.tel.Meter
	capG, err := m.Int64ObservableGauge(contract.MetricCapacity, metric.WithUnit(contract.UnitRuns),
		metric.WithDescription("Runs the worker may hold at once."))
	if err != nil {
		return err
	}
	active, err := m.Int64ObservableGauge(contract.MetricRunsActive, metric.WithUnit(contract.UnitRuns),
		metric.WithDescription("Runs the worker holds now."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		w.mu.Lock()
		n := len(w.runs)
		w.mu.Unlock()
		o.ObserveInt64(capG, int64(w.cfg.Capacity))
		o.ObserveInt64(active, int64(n))
		return nil
	}, capG, active)
	return err
}

// burn makes the main process busy for BusyFraction of every 10 ms (of one
// core) until ctx ends: a main thread held up by work of its own.
func (w *Worker) burn(ctx context.Context) {
	defer w.wg.Done()
	const period = 10 * time.Millisecond
	busy := time.Duration(w.cfg.BusyFraction * float64(period))
	x := uint64(1)
	for ctx.Err() == nil {
		start := time.Now()
		for time.Since(start) < busy {
			x = x*6364136223846793005 + 1442695040888963407 // work the compiler cannot drop
		}
		if rest := period - busy; rest > 0 {
			time.Sleep(rest)
		}
	}
	burnSink.Store(x)
}

// burnSink keeps burn's result alive.
var burnSink atomic.Uint64

// leak makes the main process keep, and touch, LeakBytes more: resident
// memory that only a restart gives back (OpenFn's growing main heap).
func (w *Worker) leak() {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(w.cfg.LeakBytes, w.cfg.LeakMax-w.leaked)
	if n <= 0 {
		return
	}
	b := make([]byte, n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	w.leaks = append(w.leaks, b)
	w.leaked += n
}

// jitter returns a seeded duration in [lo, hi).
func (w *Worker) jitter(lo, hi time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}
