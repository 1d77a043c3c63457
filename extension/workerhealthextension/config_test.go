package workerhealthextension

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
)

func TestDefaultConfig(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	assert.Equal(t, "localhost:8090", cfg.NetAddr.Endpoint, "must bind to loopback by default")
	assert.Equal(t, time.Minute, cfg.RecoveryDuration)
	assert.Equal(t, 5*time.Second, cfg.PageRefresh)
	assert.Equal(t, 10*time.Second, cfg.ReadHeaderTimeout)
	assert.Equal(t, int64(64<<10), cfg.MaxRequestBodySize)
	assert.Equal(t, 30*time.Minute, cfg.History.Window)
	assert.Equal(t, 10*time.Second, cfg.History.Resolution)
	assert.Nil(t, cfg.History.StorageID, "history in memory unless a storage is named")
	require.True(t, cfg.Keepalive.HasValue())
	assert.Equal(t, time.Minute, cfg.Keepalive.Get().IdleTimeout)
	require.NoError(t, cfg.Validate())
}

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	tests := []struct {
		id      component.ID
		check   func(t *testing.T, cfg *Config)
		wantErr string
	}{
		{
			id: component.NewID(metadata.Type),
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, createDefaultConfig(), cfg)
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "custom"),
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, "0.0.0.0:9099", cfg.NetAddr.Endpoint)
				assert.Equal(t, 30*time.Second, cfg.RecoveryDuration)
				assert.Equal(t, 2*time.Second, cfg.PageRefresh)
				assert.Equal(t, 5*time.Second, cfg.ReadHeaderTimeout)
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "history"),
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, time.Hour, cfg.History.Window)
				assert.Equal(t, 30*time.Second, cfg.History.Resolution)
				require.NotNil(t, cfg.History.StorageID)
				assert.Equal(t, component.MustNewID("file_storage"), *cfg.History.StorageID)
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "history_off"),
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, time.Duration(0), cfg.History.Window)
			},
		},
		{id: component.NewIDWithName(metadata.Type, "history_off_storage"), wantErr: "history::storage_id: the history is off (history::window: 0)"},
		{id: component.NewIDWithName(metadata.Type, "bad_resolution"), wantErr: "history::resolution: must be at least 1s, got 500ms"},
		{id: component.NewIDWithName(metadata.Type, "bad_window"), wantErr: "history::window: must be at least history::resolution (10s), or 0 to turn the history off, got 5s"},
		{id: component.NewIDWithName(metadata.Type, "too_many_samples"), wantErr: "history::window: 24h0m0s at a resolution of 10s is 8640 samples per worker, more than 720"},
		{id: component.NewIDWithName(metadata.Type, "bad_refresh"), wantErr: "page_refresh: must be at least 1s"},
		{id: component.NewIDWithName(metadata.Type, "bad_recovery"), wantErr: "recovery_duration: must not be negative"},
		{id: component.NewIDWithName(metadata.Type, "no_endpoint"), wantErr: "endpoint: must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := createDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, cfg.(*Config))
		})
	}
}

func TestValidateReadHeaderTimeout(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.ReadHeaderTimeout = 0
	require.ErrorContains(t, cfg.Validate(), "read_header_timeout")
}
