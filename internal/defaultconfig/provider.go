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

// MemoryLimitShare is the part of the built-in configuration's memory_limiter
// limit_mib that the binary gives the Go runtime as its soft memory limit
// when GOMEMLIMIT is not set (docs/reliability.md): the limiter checks the
// heap once a second and refuses data above its soft limit; the runtime
// limit makes the garbage collector keep the whole heap, garbage included,
// under this share in between. Without it the RSS measured under a flood
// ran at 2 to 3 times the live heap, over limit_mib.
const MemoryLimitShare = 0.7

// MemoryLimit returns the soft memory limit in bytes for the built-in
// configuration: MemoryLimitShare of its memory_limiter's limit_mib.
func MemoryLimit() (int64, error) {
	raw, err := confmap.NewRetrievedFromYAML(workerwatch.DefaultConfig)
	if err != nil {
		return 0, err
	}
	conf, err := raw.AsConf()
	if err != nil {
		return 0, err
	}
	var cfg struct {
		Processors struct {
			MemoryLimiter struct {
				LimitMiB int64 `mapstructure:"limit_mib"`
			} `mapstructure:"memory_limiter"`
		} `mapstructure:"processors"`
	}
	if err := conf.Unmarshal(&cfg, confmap.WithIgnoreUnused()); err != nil {
		return 0, err
	}
	mib := cfg.Processors.MemoryLimiter.LimitMiB
	if mib <= 0 {
		return 0, fmt.Errorf("the built-in configuration has no processors::memory_limiter::limit_mib")
	}
	return int64(float64(mib<<20) * MemoryLimitShare), nil
}
