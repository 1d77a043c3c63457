package mapping // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"

import (
	"cmp"
	"slices"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
)

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

// DefaultSchedulerConfig is the scheduler section's default.
func DefaultSchedulerConfig() SchedulerConfig {
	return SchedulerConfig{
		ServiceNames:     []string{"workersim-scheduler", "scheduler"},
		View:             contract.ViewEvents,
		SnapshotInterval: 30 * time.Second,
		SignOfLife:       LifeClaims,
	}
}

// Schedulers are the scheduler sources the section names, in order: those
// of service_names, then sources (each field left out taking the section's
// value). mappingKeys are mapping.worker_id_attributes, the ids a scheduler
// without its own uses.
func (sc *SchedulerConfig) Schedulers(mappingKeys []string) []Scheduler {
	defKeys := sc.WorkerIDAttributes
	if len(defKeys) == 0 {
		defKeys = mappingKeys
	}
	var out []Scheduler
	for _, n := range sc.ServiceNames {
		out = append(out, Scheduler{Name: n, View: sc.View, Keys: WithTreeKey(defKeys), Interval: sc.SnapshotInterval, Life: sc.SignOfLife})
	}
	for _, s := range sc.Sources {
		r := Scheduler{
			Name: s.ServiceName, View: cmp.Or(s.View, sc.View), Keys: defKeys,
			Interval: cmp.Or(s.SnapshotInterval, sc.SnapshotInterval), Life: cmp.Or(s.SignOfLife, sc.SignOfLife),
		}
		if len(s.WorkerIDAttributes) > 0 {
			r.Keys = s.WorkerIDAttributes
		}
		r.Keys = WithTreeKey(r.Keys)
		out = append(out, r)
	}
	return out
}

// IDKeys is every distinct worker id attribute of the workers (mappingKeys)
// and the schedulers, in a fixed order (a worker's sources record them as
// bits).
func IDKeys(mappingKeys []string, scheds []Scheduler) []string {
	keys := WithTreeKey(mappingKeys)
	for _, s := range scheds {
		for _, k := range s.Keys {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}
