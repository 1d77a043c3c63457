package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// Config of the worker_health processor. Every key is documented in
// docs/processor.md and every rule in docs/health-rules.md; the defaults are
// set only in createDefaultConfig.
type Config struct {
	// EmitInterval is how often workers are evaluated and the derived metrics,
	// transition logs and the snapshot for the health extension are emitted.
	// Default 10s, at least MinEmitInterval. Every time-based rule is
	// evaluated at this resolution.
	EmitInterval time.Duration `mapstructure:"emit_interval"`

	// ResendInterval is how often a worker's series are sent again when
	// none of their values changed; a change is sent at the evaluation that
	// sees it, with its group of series (claims, runs held, the verdict).
	// An exporter that keeps each series' last value (Prometheus's, until
	// its metric_expiration) shows the same series either way, and
	// takes a steady fleet's emission many times faster. Keep it at most
	// half the downstream exporter's expiry (the Prometheus exporter's
	// metric_expiration: 5m by default, 2m in the shipped configs).
	// Default 1m; 0 (or any value up to emit_interval) sends every worker's
	// series at every evaluation. The fleet figures and histograms are sent
	// at every evaluation.
	ResendInterval time.Duration `mapstructure:"resend_interval"`

	// HealthExtension is the id of the worker_health extension (the health
	// API) the state is published to after every evaluation. Default: none
	// (nothing is published; the derived metrics and logs still flow). An id
	// that is not configured, or is not a worker_health extension, fails
	// Start with an error naming this key.
	HealthExtension *component.ID `mapstructure:"health_extension"`

	// StorageID is the optional id of a storage extension (e.g. file_storage)
	// used to checkpoint state so a restart neither forgets drift nor reports a
	// false "healthy". Default: none (state lives in memory only).
	StorageID *component.ID `mapstructure:"storage_id"`
	// CheckpointEvery writes a checkpoint every N evaluations (and always on
	// shutdown). Default 1.
	CheckpointEvery int `mapstructure:"checkpoint_every"`

	// Scheduler says which records are the scheduler's view.
	Scheduler SchedulerConfig `mapstructure:"scheduler"`
	// Mapping turns log records and spans into run lifecycle events.
	Mapping MappingConfig `mapstructure:"mapping"`
	// Metrics names the input metrics read from the worker_process receiver,
	// the workers and the scheduler.
	Metrics MetricsInputConfig `mapstructure:"metrics"`
	// Capacity is the runs each worker may hold when the worker does not say.
	Capacity CapacityConfig `mapstructure:"capacity"`
	// Identity reports workers whose sources never meet.
	Identity IdentityConfig `mapstructure:"identity"`

	Memory     MemoryRule   `mapstructure:"memory"`
	Kills      KillsRule    `mapstructure:"kills"`
	Recycle    RecycleRule  `mapstructure:"recycle"`
	CPU        CPURule      `mapstructure:"cpu"`
	Stalled    StalledRule  `mapstructure:"stalled"`
	Lost       LostRule     `mapstructure:"lost"`
	Drift      DriftRule    `mapstructure:"drift"`
	Fleet      FleetRule    `mapstructure:"fleet"`
	Hysteresis Hysteresis   `mapstructure:"hysteresis"`
	Limits     LimitsConfig `mapstructure:"limits"`

	// HistogramBuckets are the explicit bounds, in seconds, of the run duration,
	// claim-to-start and stage duration histograms.
	HistogramBuckets []float64 `mapstructure:"histogram_buckets"`

	// prevent unkeyed literal initialization
	_ struct{}
}

var _ component.Config = (*Config)(nil)

// MinEmitInterval is the shortest emit_interval. Every evaluation judges
// every worker, builds the derived metrics, publishes a snapshot to the
// health API and (checkpoint_every) writes a checkpoint: at
// limits.max_workers that is a few hundred milliseconds of CPU
// (BenchmarkTick, docs/processor.md), while the rules' inputs (scrapes,
// heartbeats) arrive every few seconds, so a shorter period costs CPU and
// gains nothing.
const MinEmitInterval = time.Second

// maxIDKeys bounds the distinct worker id attributes (a worker remembers
// which it was named by in a bit mask); maxRoleLimits the roles with a
// memory limit (each is a memory episode per worker).
const (
	maxIDKeys     = 8
	maxRoleLimits = 8
)

// The mapping's sections (internal/mapping holds them and their docs).
type (
	SchedulerConfig    = mapping.SchedulerConfig
	SchedulerSource    = mapping.SchedulerSource
	MappingConfig      = mapping.Config
	EventNames         = mapping.EventNames
	KillReasonPattern  = mapping.KillReasonPattern
	MetricsInputConfig = mapping.MetricsConfig
)

var signsOfLife = []string{mapping.LifeClaims, mapping.LifeAny, mapping.LifeNone}

// mappingSettings resolves what the mapper reads.
func (c *Config) mappingSettings() *mapping.Settings {
	return &mapping.Settings{
		Mapping: &c.Mapping, Metrics: &c.Metrics, Schedulers: c.schedulers(), IDKeys: c.idKeys(),
		MaxAttributeLength: c.Limits.MaxAttributeLength, ChildRoles: c.Kills.ChildRoles,
	}
}

// schedulers resolves scheduler.service_names and scheduler.sources.
// trackerConfig is what the tracker reads (internal/tracker).
func (c *Config) trackerConfig() *tracker.Config {
	return &tracker.Config{
		Capacity: c.Capacity, Identity: c.Identity, Memory: c.Memory, Kills: c.Kills, Recycle: c.Recycle, CPU: c.CPU,
		Stalled: c.Stalled, Lost: c.Lost, Drift: c.Drift, Fleet: c.Fleet, Hysteresis: c.Hysteresis, Limits: c.Limits,
		HistogramBuckets: c.HistogramBuckets, StageSpanNames: c.Mapping.StageSpanNames, EmitInterval: c.EmitInterval,
		Schedulers: c.schedulers(), IDKeys: c.idKeys(),
	}
}

func (c *Config) schedulers() []mapping.Scheduler {
	return c.Scheduler.Schedulers(c.Mapping.WorkerIDAttributes)
}

// idKeys is every distinct worker id attribute of the workers and the
// schedulers, in a fixed order (a worker's sources record them as bits).
func (c *Config) idKeys() []string {
	return mapping.IDKeys(c.Mapping.WorkerIDAttributes, c.schedulers())
}
