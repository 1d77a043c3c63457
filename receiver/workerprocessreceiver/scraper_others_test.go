//go:build !linux

package workerprocessreceiver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

// Elsewhere than on Linux the receiver is created from a valid config, and
// Start says the platform is unsupported.
func TestStartUnsupportedPlatform(t *testing.T) {
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Workers = []WorkerConfig{{ID: "w", Selector: SelectorConfig{Executable: "node"}}}
	require.NoError(t, cfg.Validate())
	r, err := f.CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	require.NoError(t, err)
	require.ErrorIs(t, r.Start(context.Background(), componenttest.NewNopHost()), errUnsupportedPlatform)
	require.NoError(t, r.Shutdown(context.Background()))
}
