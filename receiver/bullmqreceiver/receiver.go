package bullmqreceiver // import "github.com/workerwatch/workerwatch/receiver/bullmqreceiver"

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/receiver/bullmqreceiver/internal/metadata"
)

// bullReceiver reads BullMQ's state in Redis every poll_interval and emits
// it: one instance for both signals of a configuration.
type bullReceiver struct {
	cfg *Config
	set receiver.Settings
	tel *telemetry
	mb  *metadata.MetricsBuilder

	mu      sync.Mutex
	logs    consumer.Logs
	metrics consumer.Metrics
	starts  int
	stopped bool

	client redis.UniversalClient
	store  storage.Client
	host   component.Host

	queues     map[string]*queueState
	discovered time.Time
	// connErr: the last connection-level error (logged once until it clears).
	connErr string
	// status: the last status reported (reported again only on change).
	status string

	cancel     context.CancelFunc
	done       chan struct{}
	onShutdown func()
}

func newReceiver(set receiver.Settings, cfg *Config) (*bullReceiver, error) {
	tel, err := newTelemetry(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	return &bullReceiver{
		cfg: cfg, set: set, tel: tel,
		mb:     metadata.NewMetricsBuilder(cfg.MetricsBuilderConfig, set),
		queues: map[string]*queueState{},
		status: "not reported",
	}, nil
}

// options turns the configuration into go-redis' universal options: a
// single node, Sentinel (sentinel.master_name) or Cluster (cluster.enabled).
func (c *Config) options(ctx context.Context) (*redis.UniversalOptions, error) {
	o := &redis.UniversalOptions{
		Addrs:        []string{c.Endpoint},
		Username:     c.Username,
		Password:     string(c.Password),
		DB:           c.DB,
		DialTimeout:  c.Timeout,
		ReadTimeout:  c.Timeout,
		WriteTimeout: c.Timeout,
		// One poll at a time: a small pool, no retries hiding a fault for
		// longer than one poll.
		PoolSize:   2,
		MaxRetries: 1,
		// The collector's connection is named so an operator sees it in
		// CLIENT LIST; it is no BullMQ name, so never read as a worker.
		ClientName: "workerwatch-bullmq-receiver",
		// No CLIENT SETINFO (Redis 7.2+): one command less to allow.
		DisableIdentity: true,
	}
	if !c.TLS.Insecure {
		tc, err := c.TLS.LoadTLSConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		o.TLSConfig = tc
	}
	switch {
	case c.Sentinel.MasterName != "":
		o.MasterName = c.Sentinel.MasterName
		o.Addrs = c.Sentinel.Addresses
		o.SentinelUsername = c.Sentinel.Username
		o.SentinelPassword = string(c.Sentinel.Password)
	case c.Cluster.Enabled:
		o.IsClusterMode = true
		o.Addrs = append([]string{c.Endpoint}, c.Cluster.Addresses...)
		o.DB = 0
	}
	return o, nil
}

func (r *bullReceiver) Start(ctx context.Context, host component.Host) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	if r.starts > 1 {
		return nil
	}
	r.host = host
	opts, err := r.cfg.options(ctx)
	if err != nil {
		return err
	}
	if r.cfg.StorageID != nil {
		ext, ok := host.GetExtensions()[*r.cfg.StorageID]
		if !ok {
			return fmt.Errorf("storage: extension %q not found (list it under service.extensions)", r.cfg.StorageID)
		}
		se, ok := ext.(storage.Extension)
		if !ok {
			return fmt.Errorf("storage: extension %q is not a storage extension", r.cfg.StorageID)
		}
		if r.store, err = se.GetClient(ctx, component.KindReceiver, r.set.ID, ""); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
	}
	r.client = redis.NewUniversalClient(opts)
	for _, q := range r.cfg.Queues {
		r.queues[q] = newQueueState(r.cfg.Prefix, q)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go r.run(runCtx)
	return nil
}

func (r *bullReceiver) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.starts--
	if r.starts > 0 || r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	var errs []error
	if r.client != nil {
		errs = append(errs, r.client.Close())
	}
	if r.store != nil {
		errs = append(errs, r.store.Close(ctx))
	}
	r.tel.shutdown()
	if r.onShutdown != nil {
		r.onShutdown()
	}
	return errors.Join(errs...)
}

func (r *bullReceiver) run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		r.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll reads every queue once and emits what it read. A failing queue is
// reported (status, one log line naming the queue and the key) and skipped:
// the other queues are emitted.
func (r *bullReceiver) poll(ctx context.Context) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, max(r.cfg.PollInterval*5, r.cfg.Timeout*2))
	defer cancel()
	now := pcommon.NewTimestampFromTime(start)

	workers, err := r.connectedWorkers(pctx)
	if err == nil && len(r.cfg.Queues) == 0 {
		err = r.discover(pctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		r.tel.errored(ctx)
		msg := err.Error()
		if msg != r.connErr {
			r.connErr = msg
			r.set.Logger.Error("Cannot read Redis (every queue skipped until it answers)",
				zap.String("endpoint", r.cfg.Endpoint), zap.Error(err))
		}
		r.report(fmt.Errorf("redis %s: %w", r.cfg.Endpoint, err))
		return
	}
	if r.connErr != "" {
		r.set.Logger.Info("Redis answers again", zap.String("endpoint", r.cfg.Endpoint))
		r.connErr = ""
	}

	ld := plog.NewLogs()
	sched := ld.ResourceLogs().AppendEmpty()
	sched.Resource().Attributes().PutStr(contract.AttrServiceName, r.cfg.ServiceName)
	sl := sched.ScopeLogs().AppendEmpty()
	sl.Scope().SetName(scopeName)
	wl := newWorkerLogs(ld)

	qnames := make([]string, 0, len(r.queues))
	for n := range r.queues {
		qnames = append(qnames, n)
	}
	slices.Sort(qnames)
	var failed []error
	for _, n := range qnames {
		q := r.queues[n]
		res, err := r.pollQueue(pctx, q, workers[q.encoded], sl.LogRecords(), wl, now)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.tel.errored(ctx)
			if msg := err.Error(); msg != q.failing {
				q.failing = msg
				var qe *queueError
				key := ""
				if errors.As(err, &qe) {
					key = qe.key
				}
				r.set.Logger.Error("Cannot read a BullMQ queue (the other queues are read)",
					zap.String("queue", q.name), zap.String("key", key), zap.Error(errors.Unwrap(err)))
			}
			failed = append(failed, err)
			continue
		}
		if q.failing != "" {
			r.set.Logger.Info("BullMQ queue read again", zap.String("queue", q.name))
			q.failing = ""
		}
		for i, k := range countKeys {
			r.mb.RecordBullmqQueueJobsDataPoint(now, res.counts[i], q.name, k.state)
		}
		r.mb.RecordBullmqQueueWorkersDataPoint(now, int64(res.workers), q.name)
	}

	r.mu.Lock()
	logs, metrics := r.logs, r.metrics
	r.mu.Unlock()
	if logs != nil && ld.LogRecordCount() > 0 {
		if err := logs.ConsumeLogs(ctx, ld); err != nil {
			r.set.Logger.Debug("Logs refused downstream", zap.Error(err))
		}
	}
	rb := r.mb.NewResourceBuilder()
	rb.SetServiceName(r.cfg.ServiceName)
	md := r.mb.Emit(metadata.WithResource(rb.Emit()))
	if metrics != nil && md.DataPointCount() > 0 {
		if err := metrics.ConsumeMetrics(ctx, md); err != nil {
			r.set.Logger.Debug("Metrics refused downstream", zap.Error(err))
		}
	}
	r.tel.polled(ctx, time.Since(start))
	r.report(errors.Join(failed...))
}

const scopeName = "github.com/workerwatch/workerwatch/receiver/bullmqreceiver"

// report sets the component status: OK, or a recoverable error naming what
// fails (Redis, or each failing queue and key).
func (r *bullReceiver) report(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == r.status || r.host == nil {
		return
	}
	r.status = msg
	if err == nil {
		componentstatus.ReportStatus(r.host, componentstatus.NewEvent(componentstatus.StatusOK))
		return
	}
	componentstatus.ReportStatus(r.host, componentstatus.NewRecoverableErrorEvent(err))
}

// discover finds the queues under prefix: SCAN for <prefix>:*:meta (every
// BullMQ queue has its meta hash once a Queue or Worker opened it).
func (r *bullReceiver) discover(ctx context.Context) error {
	// Until a queue is found, every poll looks (the collector may start
	// before the first Queue or Worker touched Redis).
	if len(r.queues) > 0 && time.Since(r.discovered) < r.cfg.DiscoveryInterval {
		return nil
	}
	pat := r.cfg.Prefix + ":*:meta"
	found := map[string]bool{}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pat, 1000).Result()
			r.tel.commands(ctx, 1)
			if err != nil {
				return err
			}
			for _, k := range keys {
				name := strings.TrimSuffix(strings.TrimPrefix(k, r.cfg.Prefix+":"), ":meta")
				if name != "" {
					found[name] = true
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		var mu sync.Mutex // ForEachMaster runs the nodes concurrently
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, c)
		})
	} else {
		err = scan(ctx, r.client)
	}
	if err != nil {
		return fmt.Errorf("discovering queues (SCAN %s): %w", pat, err)
	}
	for n := range found {
		if _, ok := r.queues[n]; !ok {
			r.queues[n] = newQueueState(r.cfg.Prefix, n)
			r.set.Logger.Info("BullMQ queue found", zap.String("queue", n))
		}
	}
	r.discovered = time.Now()
	return nil
}

// The stream position of each queue, kept in storage under
// "stream/<queue>".
func (r *bullReceiver) loadPosition(ctx context.Context, q *queueState) string {
	if r.store == nil {
		return ""
	}
	b, err := r.store.Get(ctx, "stream/"+q.name)
	if err != nil {
		r.set.Logger.Warn("Cannot read the kept stream position; starting at the stream's end",
			zap.String("queue", q.name), zap.Error(err))
		return ""
	}
	return string(b)
}

func (r *bullReceiver) savePosition(ctx context.Context, q *queueState) {
	if r.store == nil {
		return
	}
	if err := r.store.Set(ctx, "stream/"+q.name, []byte(q.lastID)); err != nil {
		r.set.Logger.Warn("Cannot keep the stream position", zap.String("queue", q.name), zap.Error(err))
	}
}
