package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"cmp"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
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

// SchedulerConfig says which records are a scheduler's view and how each
// scheduler states what it holds (docs/health-rules.md, "Scheduler views").
type SchedulerConfig struct {
	// ServiceNames: records whose resource service.name is one of these are a
	// scheduler's view, with the view, id attributes and snapshot interval
	// below; all other records are the workers' own.
	// Default [workersim-scheduler, scheduler].
	ServiceNames []string `mapstructure:"service_names"`
	// View is how those schedulers state which runs they hold: "events"
	// (claims and ends), "claims_only" (claims, no ends: the worker's own
	// end closes the claim; OpenFn's Lightning) or "snapshots" (a periodic
	// statement of every run held per worker). Default "events".
	View string `mapstructure:"view"`
	// WorkerIDAttributes name the worker on a scheduler's records, tried in
	// order (record attribute, then resource attribute). Default: none, which
	// means mapping.worker_id_attributes.
	WorkerIDAttributes []string `mapstructure:"worker_id_attributes"`
	// SnapshotInterval is how often a "snapshots" scheduler states what it
	// holds. A worker not restated for three intervals loses the runs its
	// last snapshot listed (counted as healed). Default 30s.
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	// SignOfLife: which of these schedulers' records about a worker count as
	// a sign of its life for the lost rule: "claims" (a claims_only
	// scheduler's claims: it is pulled, a claim exists because the worker
	// just asked for work), "any" (every record or snapshot naming the
	// worker: a queue whose snapshots state only workers with an open
	// connection) or "none". Default "claims".
	SignOfLife string `mapstructure:"sign_of_life"`
	// Sources are further schedulers, each with its own settings; a field
	// left out takes the value above.
	Sources []SchedulerSource `mapstructure:"sources"`
}

// SchedulerSource is one scheduler with its own view.
type SchedulerSource struct {
	// ServiceName is the resource service.name of its records. Required.
	ServiceName string `mapstructure:"service_name"`
	// View: events, claims_only or snapshots. Default: scheduler.view.
	View string `mapstructure:"view"`
	// WorkerIDAttributes. Default: scheduler.worker_id_attributes.
	WorkerIDAttributes []string `mapstructure:"worker_id_attributes"`
	// SnapshotInterval. Default: scheduler.snapshot_interval.
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	// SignOfLife: claims, any or none. Default: scheduler.sign_of_life.
	SignOfLife string `mapstructure:"sign_of_life"`
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
func (c *Config) schedulers() []mapping.Scheduler {
	sc := &c.Scheduler
	defKeys := sc.WorkerIDAttributes
	if len(defKeys) == 0 {
		defKeys = c.Mapping.WorkerIDAttributes
	}
	var out []mapping.Scheduler
	for _, n := range sc.ServiceNames {
		out = append(out, mapping.Scheduler{Name: n, View: sc.View, Keys: mapping.WithTreeKey(defKeys), Interval: sc.SnapshotInterval, Life: sc.SignOfLife})
	}
	for _, s := range sc.Sources {
		r := mapping.Scheduler{
			Name: s.ServiceName, View: cmp.Or(s.View, sc.View), Keys: defKeys,
			Interval: cmp.Or(s.SnapshotInterval, sc.SnapshotInterval), Life: cmp.Or(s.SignOfLife, sc.SignOfLife),
		}
		if len(s.WorkerIDAttributes) > 0 {
			r.Keys = s.WorkerIDAttributes
		}
		r.Keys = mapping.WithTreeKey(r.Keys)
		out = append(out, r)
	}
	return out
}

// idKeys is every distinct worker id attribute of the workers and the
// schedulers, in a fixed order (a worker's sources record them as bits).
func (c *Config) idKeys() []string {
	keys := mapping.WithTreeKey(c.Mapping.WorkerIDAttributes)
	for _, s := range c.schedulers() {
		for _, k := range s.Keys {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}
