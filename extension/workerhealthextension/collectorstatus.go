package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/pipeline"
)

// Why not contrib's pkg/status (v0.165.1, the aggregator healthcheckv2 uses):
// read in its aggregator.go, it keeps per component only the LAST event
// (updateStatus: ComponentStatusMap[kind:id] = &AggregateStatus{Event:
// event}) and carries the first error's time only in the per-pipeline and
// collector aggregates, and only while that error is the one of highest
// priority. /readyz here reports every component once, with its pipelines,
// with the start of ITS error episode (error_since, kept across an
// exporter's repeated recoverable errors) and applies recovery_duration per
// component, naming each one in the reasons (docs/http-api.md). Built on
// pkg/status, that needs the per-component episode start kept beside the
// aggregator (what this file is), and its per-pipeline tree remapped to the
// documented body. Its event times are the events' own (time.Now at
// creation), which the recovery tests here drive with a clock instead.
// So this file stays: 200 lines, the JSON the docs describe.

// collectorStatus derives the collector's own liveness and readiness from
// component status events, with the healthcheckv2 semantics, and keeps them
// apart: a component in error makes the collector not ready (take it out of
// service) long before it makes it not live (restart it), because restarting
// a collector whose exporter's backend is down fixes nothing and, fleet-wide,
// is a restart storm.
type collectorStatus struct {
	recovery time.Duration
	now      func() time.Time

	mu sync.Mutex
	// components by instance: the service hands out one *InstanceID per
	// component instance for the life of the collector, and an InstanceID
	// never changes, so its id, kind and pipelines are spelled out once.
	components map[*componentstatus.InstanceID]*componentReport
	// reports is components sorted by kind, then id: rebuilt (a new slice)
	// on every event, so a probe shares it without copying or sorting.
	reports []componentReport
	// pipelinesReady is set by PipelineWatcher.Ready (every pipeline built
	// and every receiver started) and cleared by NotReady (shutting down).
	pipelinesReady bool
	shuttingDown   bool
}

func newCollectorStatus(recovery time.Duration) *collectorStatus {
	return &collectorStatus{
		recovery:   recovery,
		now:        time.Now,
		components: map[*componentstatus.InstanceID]*componentReport{},
		reports:    []componentReport{},
	}
}

func (c *collectorStatus) record(source *componentstatus.InstanceID, ev *componentstatus.Event) {
	if source == nil || ev == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cr := c.components[source]
	if cr == nil {
		cr = newComponentReport(source)
		c.components[source] = cr
	}
	// The time comes from our clock, not ev.Timestamp(): the service hands
	// each event to Changed as it is reported, so the two agree, and one
	// clock for the recovery window lets tests drive it (the event's own
	// timestamp is always time.Now and cannot be set).
	at := c.now()
	cr.Status = statusName(ev.Status())
	cr.Since = at
	cr.Error = ""
	if err := ev.Err(); err != nil {
		cr.Error = err.Error()
	}
	// ErrorSince is when the current error episode began. Repeated error
	// events (an exporter retrying) must not restart the recovery clock. A
	// new episode gets a new pointer: the reports already handed to probes
	// share the old one.
	isErr := componentstatus.StatusIsError(ev.Status())
	switch {
	case isErr && cr.ErrorSince == nil:
		cr.ErrorSince = &at
	case !isErr:
		cr.ErrorSince = nil
	}
	reports := make([]componentReport, 0, len(c.components))
	for _, r := range c.components {
		reports = append(reports, *r)
	}
	slices.SortFunc(reports, func(a, b componentReport) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID))
	})
	c.reports = reports
}

func newComponentReport(id *componentstatus.InstanceID) *componentReport {
	cr := &componentReport{
		ID:   id.ComponentID().String(),
		Kind: strings.ToLower(id.Kind().String()),
	}
	id.AllPipelineIDs(func(p pipeline.ID) bool {
		cr.Pipelines = append(cr.Pipelines, p.String())
		return true
	})
	slices.Sort(cr.Pipelines)
	return cr
}

func (c *collectorStatus) setPipelinesReady(ready bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pipelinesReady = ready
	if !ready {
		c.shuttingDown = true
	}
}

// probeResult is the body of /livez and /readyz.
type probeResult struct {
	// Status is "ok" or "fail"; the HTTP code says the same (200 / 503).
	Status string `json:"status"`
	// Reasons say why not, for people; empty when ok.
	Reasons        []string          `json:"reasons"`
	PipelinesReady bool              `json:"pipelines_ready"`
	Components     []componentReport `json:"components"`
}

type componentReport struct {
	ID         string     `json:"id"`
	Kind       string     `json:"kind"`
	Pipelines  []string   `json:"pipelines,omitempty"`
	Status     string     `json:"status"`
	Since      time.Time  `json:"since"`
	ErrorSince *time.Time `json:"error_since,omitempty"`
	Error      string     `json:"error,omitempty"`
}

// live: the process answers (a wedged process cannot, and the probe's
// timeout catches that) and no component failed fatally.
func (c *collectorStatus) live() (bool, probeResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := probeResult{PipelinesReady: c.pipelinesReady, Components: c.reports}
	for _, cr := range c.reports {
		if cr.Status == statusFatal {
			res.Reasons = append(res.Reasons, fatalReason(cr))
		}
	}
	return finish(res)
}

// ready: pipelines are up, nothing failed fatally, and no component has been
// in error for longer than recovery_duration.
func (c *collectorStatus) ready() (bool, probeResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := probeResult{PipelinesReady: c.pipelinesReady, Components: c.reports}
	switch {
	case c.shuttingDown:
		res.Reasons = append(res.Reasons, "the collector is shutting down")
	case !c.pipelinesReady:
		res.Reasons = append(res.Reasons, "pipelines are not started yet")
	}
	now := c.now()
	for _, cr := range c.reports {
		switch {
		case cr.Status == statusFatal:
			res.Reasons = append(res.Reasons, fatalReason(cr))
		case cr.ErrorSince != nil && now.Sub(*cr.ErrorSince) >= c.recovery:
			res.Reasons = append(res.Reasons, cr.Kind+" "+cr.ID+" in "+cr.Status+
				" for "+now.Sub(*cr.ErrorSince).Truncate(time.Second).String()+
				" (recovery_duration "+c.recovery.String()+"): "+cr.Error)
		}
	}
	return finish(res)
}

func fatalReason(cr componentReport) string {
	return cr.Kind + " " + cr.ID + " failed fatally: " + cr.Error
}

func finish(res probeResult) (bool, probeResult) {
	if len(res.Reasons) == 0 {
		res.Status = "ok"
		res.Reasons = []string{}
		return true, res
	}
	res.Status = "fail"
	return false, res
}

const statusFatal = "fatal_error"

// statusName is a component status as the probes' JSON spells it: stable
// snake_case rather than the Go constant names.
func statusName(s componentstatus.Status) string {
	switch s {
	case componentstatus.StatusStarting:
		return "starting"
	case componentstatus.StatusOK:
		return "ok"
	case componentstatus.StatusRecoverableError:
		return "recoverable_error"
	case componentstatus.StatusPermanentError:
		return "permanent_error"
	case componentstatus.StatusFatalError:
		return statusFatal
	case componentstatus.StatusStopping:
		return "stopping"
	case componentstatus.StatusStopped:
		return "stopped"
	default:
		return "none"
	}
}
