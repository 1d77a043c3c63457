package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/extension"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/cluster"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
)

const (
	// defaultEndpoint binds to loopback: the API lists every worker and its
	// runs, so exposing it is an explicit decision (endpoint: 0.0.0.0:8090).
	defaultEndpoint = "localhost:8090"
	// defaultMaxRequestBodySize: every endpoint is a GET; a body larger than
	// this is a client error or an attack, not a request we serve.
	defaultMaxRequestBodySize = 64 << 10
	// defaultReadHeaderTimeout is short because probes and schedulers send a
	// few hundred bytes of headers; a slow sender is only holding a socket.
	defaultReadHeaderTimeout = 10 * time.Second
	defaultRecoveryDuration  = time.Minute
	defaultPageRefresh       = 5 * time.Second
	// 30 minutes at 10 s: 180 samples per worker (docs/http-api.md).
	defaultHistoryWindow     = 30 * time.Minute
	defaultHistoryResolution = 10 * time.Second
)

// NewFactory creates the worker_health extension factory.
func NewFactory() extension.Factory {
	return extension.NewFactory(
		metadata.Type,
		createDefaultConfig,
		createExtension,
		metadata.ExtensionStability,
	)
}

func createDefaultConfig() component.Config {
	srv := confighttp.NewDefaultServerConfig()
	srv.NetAddr.Endpoint = defaultEndpoint
	srv.ReadHeaderTimeout = defaultReadHeaderTimeout
	srv.MaxRequestBodySize = defaultMaxRequestBodySize
	// NewDefaultServerConfig already sets keepalive idle_timeout (1m) and
	// write_timeout (30s); both are kept.
	return &Config{
		ServerConfig:     srv,
		RecoveryDuration: defaultRecoveryDuration,
		PageRefresh:      defaultPageRefresh,
		History: HistoryConfig{
			Window:     defaultHistoryWindow,
			Resolution: defaultHistoryResolution,
		},
		Cluster: cluster.DefaultConfig(),
	}
}

func createExtension(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	return newWorkerHealth(set, cfg.(*Config))
}
