// Package defaultconfig is a confmap provider for the built-in default
// configuration. The URI "workerwatch:default" resolves to config.yaml at the
// repository root, embedded in the binary; cmd/otelcol-workerwatch adds that
// URI when the user gives no --config, so `otelcol-workerwatch` alone runs.
package defaultconfig

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/confmap"

	"github.com/workerwatch/workerwatch"
)

// Scheme is the URI scheme this provider serves.
const Scheme = "workerwatch"

// URI is the one URI it knows.
const URI = Scheme + ":default"

type provider struct{}

// NewFactory returns the factory ocb lists in the distribution's providers.
func NewFactory() confmap.ProviderFactory {
	return confmap.NewProviderFactory(func(confmap.ProviderSettings) confmap.Provider { return provider{} })
}

func (provider) Retrieve(_ context.Context, uri string, _ confmap.WatcherFunc) (*confmap.Retrieved, error) {
	if uri != URI {
		return nil, fmt.Errorf("unknown built-in configuration %q: the only one is %q", uri, URI)
	}
	return confmap.NewRetrievedFromYAML(workerwatch.DefaultConfig)
}

func (provider) Scheme() string                 { return Scheme }
func (provider) Shutdown(context.Context) error { return nil }
