package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/cluster"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
)

// Config is the worker_health extension's configuration. The HTTP paths are
// fixed (docs/http-api.md): they are the API a scheduler and probes are
// written against, so they are not a knob.
type Config struct {
	// ServerConfig is the HTTP server: endpoint (default "localhost:8090",
	// loopback only, because the API reveals the fleet), tls, cors, auth (any
	// collector auth extension, e.g. bearertokenauth), timeouts and the request
	// body limit. Squashed so its keys sit at the top level like every other
	// collector HTTP server.
	confighttp.ServerConfig `mapstructure:",squash"`

	// RecoveryDuration is how long a component may stay in a recoverable or
	// permanent error before /readyz reports the collector not ready (the
	// healthcheckv2 recovery_duration). A short blip (an exporter retrying)
	// must not take the collector out of service. Default 1m; 0 means any
	// error makes it not ready at once.
	RecoveryDuration time.Duration `mapstructure:"recovery_duration"`

	// PageRefresh is how often the status page at / refreshes itself (by a
	// fetch of /health/workers, or a meta refresh when JavaScript is off).
	// Default 5s; at least 1s so a forgotten browser tab cannot load the
	// collector.
	PageRefresh time.Duration `mapstructure:"page_refresh"`

	// History is what the worker pages (/workers/{id}) and
	// /health/workers/{id}/history keep of each worker.
	History HistoryConfig `mapstructure:"history"`
	// Cluster makes this collector one shard of a sharded gateway tier
	// (internal/cluster/config.go, docs/scaling.md). Off by default.
	Cluster cluster.Config `mapstructure:"cluster"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// HistoryConfig sizes the per-worker history: a fixed ring of
// window / resolution samples per worker (packed: about 13 bytes each for a
// steady worker, 64 unpacked) and the last 16
// state transitions, fed from the snapshots the processor publishes.
type HistoryConfig struct {
	// Window is how far back the history goes. Default 30m. 0 turns the
	// history off: nothing is kept per worker for it, and the worker
	// pages and /health/workers/{id}/history show none (a gateway that
	// only answers schedulers and probes saves its memory).
	Window time.Duration `mapstructure:"window"`
	// Resolution is the time between two samples of a worker: a processor
	// that evaluates more often updates the step's sample instead of adding
	// one. Default 10s; at least 1s; at most maxHistorySamples samples per
	// window (memory grows with window / resolution).
	Resolution time.Duration `mapstructure:"resolution"`
	// StorageID names a storage extension (e.g. file_storage) that keeps the
	// history across restarts. Unset (the default): the history starts
	// empty after a restart.
	StorageID *component.ID `mapstructure:"storage_id"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// maxHistorySamples bounds window / resolution: 720 samples (2h at 10s) are
// 45 KiB per worker unpacked (about 9 KiB packed for a steady worker), 450 MiB
// unpacked at 10,000 workers.
const maxHistorySamples = 720

var _ component.Config = (*Config)(nil)

// Validate checks the configuration; every error names its YAML key.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.NetAddr.Endpoint == "" {
		errs = append(errs, errors.New("endpoint: must not be empty (default is localhost:8090)"))
	}
	if cfg.RecoveryDuration < 0 {
		errs = append(errs, fmt.Errorf("recovery_duration: must not be negative, got %s", cfg.RecoveryDuration))
	}
	if cfg.PageRefresh < time.Second {
		errs = append(errs, fmt.Errorf("page_refresh: must be at least 1s, got %s", cfg.PageRefresh))
	}
	if cfg.ReadHeaderTimeout <= 0 {
		// Without it a client that never finishes its headers holds a
		// connection forever (slowloris); the API must stay reachable.
		errs = append(errs, fmt.Errorf("read_header_timeout: must be positive, got %s", cfg.ReadHeaderTimeout))
	}
	if cfg.MaxRequestBodySize < 0 {
		errs = append(errs, fmt.Errorf("max_request_body_size: must not be negative, got %d", cfg.MaxRequestBodySize))
	}
	h := cfg.History
	switch {
	case h.Resolution < time.Second:
		errs = append(errs, fmt.Errorf("history::resolution: must be at least 1s, got %s", h.Resolution))
	case h.Window == 0 && h.StorageID != nil:
		errs = append(errs, fmt.Errorf("history::storage_id: the history is off (history::window: 0), there is nothing to keep; remove storage_id or set a window"))
	case h.Window == 0:
		// Off.
	case h.Window < h.Resolution:
		errs = append(errs, fmt.Errorf("history::window: must be at least history::resolution (%s), or 0 to turn the history off, got %s", h.Resolution, h.Window))
	case history.Size(h.Window, h.Resolution) > maxHistorySamples:
		errs = append(errs, fmt.Errorf("history::window: %s at a resolution of %s is %d samples per worker, more than %d; raise history::resolution or shorten the window",
			h.Window, h.Resolution, history.Size(h.Window, h.Resolution), maxHistorySamples))
	}
	if err := cfg.Cluster.Check(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
