package workerhealthprocessor

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		id      string
		file    string
		check   func(t *testing.T, c *Config)
		wantErr string
	}{
		{id: "worker_health", check: func(t *testing.T, c *Config) {
			assert.Equal(t, createDefaultConfig(), c)
		}},
		{id: "worker_health/custom", check: func(t *testing.T, c *Config) {
			assert.Equal(t, 2*time.Second, c.EmitInterval)
			assert.Equal(t, time.Minute, c.ResendInterval, "the default")
			assert.Equal(t, component.MustNewIDWithName("worker_health", "api"), *c.HealthExtension)
			assert.Equal(t, component.MustNewIDWithName("file_storage", "health"), *c.StorageID)
			assert.Equal(t, []string{"lightning"}, c.Scheduler.ServiceNames)
			assert.Equal(t, []mapping.Scheduler{
				{Name: "lightning", View: "claims_only", Keys: []string{"worker_name", "cicd.worker.id"}, Interval: 30 * time.Second, Life: "claims"},
				{Name: "queue-snapshots", View: "snapshots", Keys: []string{"worker_name", "cicd.worker.id"}, Interval: 15 * time.Second, Life: "any"},
			}, c.schedulers())
			assert.Equal(t, []string{"worker_name", "cicd.worker.id"}, c.idKeys())
			assert.Equal(t, int64(268435456), c.Memory.Roles["main"].SoftLimitBytes)
			assert.Equal(t, "unhealthy", c.Kills.Effects["memory_limit"])
			assert.Equal(t, "none", c.Kills.Effects["timeout"], "a reason left out keeps its default")
			assert.Equal(t, 30*time.Second, c.Drift.HealAfter)
			assert.Equal(t, int64(536870912), c.Memory.SoftLimitBytes)
			assert.Equal(t, 20, c.Capacity.PerWorker["big-worker"])
			assert.Equal(t, 10, c.Limits.MaxUnconfirmedWorkers)
			assert.Equal(t, 500, c.Limits.MaxRuns)
			assert.False(t, c.Limits.DropUntrackedMetrics)
			assert.False(t, c.Stalled.RequirePending)
			assert.Equal(t, 3*time.Second, c.Lost.ExitGrace)
		}},
		{id: "worker_health/bad_exit_grace", wantErr: "lost.exit_grace: must not be negative, got -1s"},
		{id: "worker_health/bad_emit", wantErr: "emit_interval: must be at least 1s, got 0s"},
		{id: "worker_health/bad_resend", wantErr: "resend_interval: must not be negative (0: every evaluation), got -1m0s"},
		{id: "worker_health/resend_every_evaluation", check: func(t *testing.T, c *Config) {
			assert.Zero(t, c.ResendInterval)
		}},
		{id: "worker_health/bad_ratio", wantErr: "memory.soft_limit_ratio"},
		{id: "worker_health/bad_kill_reason", wantErr: `kills.effects: unknown kill reason "exploded"`},
		{id: "worker_health/bad_kill_effect", wantErr: `kills.effects: "timeout": unknown effect "furious"`},
		{id: "worker_health/bad_view", wantErr: `scheduler.sources[0].view: unknown view "telepathy"`},
		{id: "worker_health/bad_life", wantErr: `scheduler.sign_of_life: unknown value "sometimes"`},
		{id: "worker_health/bad_source", wantErr: `scheduler.sources[0].service_name: service name "lightning" is listed twice`},
		{id: "worker_health/bad_role_limit", wantErr: `memory.roles: "main": soft_limit_bytes must be positive`},
		{id: "worker_health/bad_heal", wantErr: "drift.heal_after: must be longer than drift.grace"},
		{id: "worker_health/no_id", wantErr: "mapping.worker_id_attributes: must name at least one attribute"},
		{id: "worker_health/bad_cpu", wantErr: "cpu.recovery_cores"},
		{id: "worker_health/bad_ttl", wantErr: "limits.worker_ttl"},
		{id: "worker_health/bad_limits", wantErr: "limits.max_runs_per_worker"},
		{id: "worker_health/bad_admission", wantErr: "limits.max_unconfirmed_workers: must not be negative, got -1"},
		{id: "worker_health/bad_admission", wantErr: "limits.max_runs: must be at least 1, got 0"},
		{id: "worker_health/bad_grace", wantErr: "drift.tombstone_ttl"},
		{id: "worker_health/bad_recycle", wantErr: "recycle.min_exits: must be at least 1 when recycle.window is set, got 0"},
		{id: "worker_health/bad_recycle", wantErr: "recycle.per_run_ratio: must be in (0, 1]"},
		{id: "worker_health/openfn", file: "openfn.yaml", check: func(t *testing.T, c *Config) {
			assert.Equal(t, []string{"worker_name", "cicd.worker.id"}, c.idKeys())
			assert.Equal(t, []string{"claim"}, c.Mapping.Events.Claimed)
			assert.Equal(t, []string{"run:start"}, c.Mapping.Events.Started)
			assert.Equal(t, []string{"kill", "crash"}, c.Mapping.KillResults)
			assert.Equal(t, "claims_only", c.schedulers()[0].View)
			assert.Equal(t, int64(512<<20), c.Memory.Roles["main"].SoftLimitBytes)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			file := tt.file
			if file == "" {
				file = "config.yaml"
			}
			cm, err := confmaptest.LoadConf(filepath.Join("testdata", file))
			require.NoError(t, err)
			var id component.ID
			require.NoError(t, id.UnmarshalText([]byte(tt.id)))
			sub, err := cm.Sub(id.String())
			require.NoError(t, err)
			cfg := createDefaultConfig()
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
