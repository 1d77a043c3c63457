package workerprocessreceiver

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	tests := []struct {
		id      string
		wantErr string // substring naming the key; "" = valid
		check   func(t *testing.T, cfg *Config)
	}{
		{id: "full", check: func(t *testing.T, cfg *Config) {
			assert.Equal(t, 5*time.Second, cfg.CollectionInterval)
			assert.Equal(t, "/hostfs/proc", cfg.ProcRoot)
			assert.Equal(t, "/hostfs/sys/fs/cgroup", cfg.CgroupRoot)
			assert.Equal(t, 30*time.Second, cfg.DiscoveryInterval)
			assert.Equal(t, 2*time.Minute, cfg.ForgetAfter)
			assert.Equal(t, 3, cfg.TopProcesses)
			assert.Equal(t, int64(100<<20), cfg.PSSMaxRSS)
			assert.Equal(t, 512, cfg.MaxOpenFiles)
			assert.True(t, cfg.Metrics.WorkerwatchProcessMemoryPss.Enabled)
			require.Len(t, cfg.Workers, 3)
			assert.Equal(t, "run", cfg.Workers[0].Roles[0].Name)
			assert.Equal(t, "job", cfg.Workers[1].DefaultRole)
		}},
		{id: "no_selector", wantErr: "workers[0].selector: one of"},
		{id: "two_selectors", wantErr: "workers[0].selector: pid_file, executable/cmdline and cgroup are exclusive"},
		{id: "bad_regex", wantErr: "workers[0].selector.cmdline: error parsing regexp"},
		{id: "bad_role_regex", wantErr: "workers[0].roles[0].cmdline: error parsing regexp"},
		{id: "unknown_role_field", wantErr: "comand"},
		{id: "negative_top", wantErr: "top_processes: must be between 0 and 100"},
		{id: "negative_open_files", wantErr: "max_open_files: must not be negative, got -1"},
		{id: "no_workers", wantErr: "workers: at least one worker is required"},
		{id: "missing_id", wantErr: "workers[0].id: required"},
		{id: "unknown_placeholder", wantErr: "workers[0].id: unknown placeholder {nope}"},
		{id: "main_role", wantErr: "workers[0].roles[0].name: \"main\" is reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(component.NewIDWithName(metadata.Type, tt.id).String())
			require.NoError(t, err)
			err = sub.Unmarshal(cfg)
			if err == nil {
				err = confmap.Validate(cfg)
			}
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, cfg.(*Config))
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	assert.Equal(t, "/proc", cfg.ProcRoot)
	assert.Equal(t, "/sys/fs/cgroup", cfg.CgroupRoot)
	assert.Equal(t, 10*time.Second, cfg.CollectionInterval)
	assert.Equal(t, time.Minute, cfg.DiscoveryInterval)
	assert.Equal(t, 10*time.Minute, cfg.ForgetAfter)
	assert.Equal(t, 5, cfg.TopProcesses)
	assert.Equal(t, int64(256<<20), cfg.PSSMaxRSS)
	assert.Equal(t, 4096, cfg.MaxOpenFiles)
	// No worker is configured by default: the config must name them.
	assert.ErrorContains(t, confmap.Validate(cfg), "workers: at least one worker is required")
}
