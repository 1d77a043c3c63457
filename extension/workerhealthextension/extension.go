package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensioncapabilities"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/cluster"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/requestguard"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// workerHealth is the extension: the store of published worker state, the
// collector's component status, and the HTTP server that serves both.
type workerHealth struct {
	id        component.ID
	cfg       *Config
	telemetry component.TelemetrySettings
	store     *store.Store
	// history is the store's history, read by the pages and the history
	// JSON.
	history *history.Store
	status  *collectorStatus
	metrics *telemetry
	page    *pages.Pages
	// now is the clock of the pages and the history JSON (time.Now).
	now     func() time.Time
	handler http.Handler
	// challenge is the WWW-Authenticate value of a 401.
	challenge []string
	// cluster is nil unless cluster.self is set (internal/cluster).
	cluster *cluster.Cluster
	// listen is cfg.ToListener; tests replace it to make Serve fail.
	listen func(context.Context) (net.Listener, error)

	// mu guards the server across Start/Shutdown, which the collector calls
	// in order but tests and reloads may repeat.
	mu     sync.Mutex
	server *http.Server
	addr   net.Addr // the bound address, for "localhost:0" and logs
	served sync.WaitGroup
}

var (
	_ extension.Extension                          = (*workerHealth)(nil)
	_ contract.Subscriber                          = (*workerHealth)(nil)
	_ extensioncapabilities.ComponentStatusWatcher = (*workerHealth)(nil)
	_ extensioncapabilities.PipelineWatcher        = (*workerHealth)(nil)
	_ extensioncapabilities.Dependent              = (*workerHealth)(nil)
)

func newWorkerHealth(set extension.Settings, cfg *Config) (*workerHealth, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	pg, err := pages.New(cfg.PageRefresh)
	if err != nil {
		return nil, err
	}
	hs := history.New(cfg.History.Window, cfg.History.Resolution)
	wh := &workerHealth{
		id:        set.ID,
		cfg:       cfg,
		telemetry: set.TelemetrySettings,
		store:     store.New(hs),
		history:   hs,
		status:    newCollectorStatus(cfg.RecoveryDuration),
		metrics:   newTelemetry(tb),
		page:      pg,
		now:       time.Now,
	}
	if cfg.Cluster.Enabled() {
		wh.cluster = cluster.New(&cfg.Cluster, set.Logger)
	}
	wh.handler = wh.routes()
	wh.challenge = authChallenge(cfg)
	wh.listen = cfg.ToListener
	return wh, nil
}

// Start binds the listener and serves in the background. A port already in
// use fails Start with an error naming the endpoint, so the collector does
// not start without its health API.
func (wh *workerHealth) Start(ctx context.Context, host component.Host) error {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	if wh.server != nil {
		return errors.New("worker_health: already started")
	}
	srv, err := wh.cfg.ToServer(ctx, host.GetExtensions(), wh.telemetry, wh.handler,
		confighttp.WithErrorHandler(wh.httpError))
	if err != nil {
		return fmt.Errorf("worker_health: cannot build the HTTP server: %w", err)
	}
	if wh.cfg.Auth.HasValue() {
		srv.Handler = canonicalAuthScheme(srv.Handler)
	}
	var historyClient storage.Client
	if id := wh.cfg.History.StorageID; id != nil {
		if historyClient, err = history.OpenStorage(ctx, host, *id, wh.id, wh.telemetry.Logger); err != nil {
			return fmt.Errorf("worker_health: %w", err)
		}
	}
	ln, err := wh.listen(ctx)
	if err != nil {
		if historyClient != nil {
			err = errors.Join(err, historyClient.Close(ctx))
		}
		return fmt.Errorf("worker_health: cannot listen on endpoint %q: %w", wh.cfg.NetAddr.Endpoint, err)
	}
	if historyClient != nil {
		wh.history.Attach(ctx, historyClient, wh.telemetry.Logger)
	}
	if !wh.cfg.TLS.HasValue() {
		ln = requestguard.Listener{Listener: ln}
	}
	if wh.cluster != nil {
		if err := wh.cluster.Start(ctx, host, wh.telemetry); err != nil {
			// Start failed: the collector does not call Shutdown's
			// serving half, so the history's storage client and its flush
			// loop end here.
			_ = ln.Close()
			return errors.Join(err, wh.history.Detach(ctx))
		}
	}
	wh.telemetry.Logger.Info("worker health API listening", zap.String("endpoint", ln.Addr().String()))
	wh.server, wh.addr = srv, ln.Addr()
	wh.served.Add(1)
	go func() {
		defer wh.served.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			// The API is gone while the collector runs: say so through
			// component status so /readyz and operators see it.
			wh.telemetry.Logger.Error("worker health API stopped serving", zap.Error(err))
			componentstatus.ReportStatus(host, componentstatus.NewPermanentErrorEvent(err))
		}
	}()
	return nil
}

// Shutdown stops serving; safe without Start and safe to call twice. After
// it, Start may be called again (a new server and listener).
func (wh *workerHealth) Shutdown(ctx context.Context) error {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	if wh.server == nil {
		return nil
	}
	if wh.cluster != nil {
		wh.cluster.Shutdown()
	}
	// Graceful first, so a probe in flight gets its answer; forced if the
	// collector's shutdown deadline runs out.
	err := wh.server.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, wh.server.Close())
	}
	wh.served.Wait()
	wh.server, wh.addr = nil, nil
	// What was published is in the history before its last write.
	wh.store.Flush()
	return errors.Join(err, wh.history.Detach(ctx))
}

// Dependencies implements extensioncapabilities.Dependent: the auth and
// storage extensions this one uses start before it and stop after it.
func (wh *workerHealth) Dependencies() []component.ID {
	var ids []component.ID
	if a := wh.cfg.Auth.Get(); a != nil {
		ids = append(ids, a.Config.AuthenticatorID)
	}
	if id := wh.cfg.History.StorageID; id != nil {
		ids = append(ids, *id)
	}
	return ids
}

// Publish implements contract.Subscriber: the processor hands over an
// immutable snapshot. It returns at once: the index (every worker's JSON)
// is built in the background, once per snapshot, so neither the processor's
// tick nor any reader builds anything.
func (wh *workerHealth) Publish(snap *contract.Snapshot) {
	if snap == nil {
		return
	}
	wh.store.Publish(snap)
	wh.metrics.published()
}

// Changed implements extensioncapabilities.ComponentStatusWatcher. It may be
// called before Start, after Shutdown and concurrently.
func (wh *workerHealth) Changed(source *componentstatus.InstanceID, event *componentstatus.Event) {
	wh.status.record(source, event)
}

// Ready implements extensioncapabilities.PipelineWatcher. The collector
// calls it once every pipeline has started, so the processors' restored
// state has been published by then; Publish only hands a snapshot over, and
// the view is built in the background. Wait for it before /readyz says yes:
// a scheduler that sends work at the first 200 must find the workers the
// checkpoint brought back, not an empty fleet (a restart's 404s).
func (wh *workerHealth) Ready() error {
	wh.store.Flush()
	wh.status.setPipelinesReady(true)
	return nil
}

// NotReady implements extensioncapabilities.PipelineWatcher.
func (wh *workerHealth) NotReady() error {
	wh.status.setPipelinesReady(false)
	return nil
}
