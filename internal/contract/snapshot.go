package contract

// The health states and the snapshot the worker_health processor publishes to
// the worker_health extension. The processor finds the extension named in its
// config (health_extension) and publishes immutable Snapshots to it; the
// extension only reads them. The JSON tags here ARE the health API's schema
// (docs/http-api.md).

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/component"
)

// State is a worker's health state.
type State string

// The states. Unknown is what a worker is until its first evaluation, and what
// every worker is again after a restart without a checkpoint: never healthy by
// default.
const (
	Unknown   State = "unknown"
	Healthy   State = "healthy"
	Degraded  State = "degraded"
	Unhealthy State = "unhealthy"
	Stalled   State = "stalled"
	Lost      State = "lost"
)

// AllStates in the order people read them, best first.
var AllStates = []State{Healthy, Degraded, Unhealthy, Stalled, Lost, Unknown}

// MayTakeWork is what a scheduler asks: healthy and degraded workers may be
// sent work (HTTP 200), every other state may not (HTTP 503).
func (s State) MayTakeWork() bool { return s == Healthy || s == Degraded }

// Severity orders states by urgency, the higher the more urgent: for people
// (the status page sorts worst first), for merging two views of one worker,
// and for telling a worse state from a better one. Unknown (not judged yet)
// ranks above degraded because it may not take work; callers that treat
// "not judged yet" specially check for Unknown first.
func Severity(s State) int {
	switch s {
	case Healthy:
		return 0
	case Degraded:
		return 1
	case Unknown:
		return 2
	case Stalled:
		return 3
	case Unhealthy:
		return 4
	case Lost:
		return 5
	}
	return -1
}

// Valid reports whether s is one of the states above.
func (s State) Valid() bool {
	for _, v := range AllStates {
		if s == v {
			return true
		}
	}
	return false
}

// Reason codes (Reason.Code). docs/health-rules.md has one line per code
// with the evidence fields it carries.
const (
	CodeMemory        = "memory_over_soft_limit"
	CodeMemoryAtStart = "memory_over_soft_limit_at_run_start"
	CodeKills         = "kills_in_window"
	CodeCPU           = "cpu_saturated"
	CodeNoClaim       = "no_claim"
	CodeNoTelemetry   = "no_telemetry"
	CodeMissing       = "drift_missing"
	CodeOrphaned      = "drift_orphaned"
	CodeOverCapacity  = "over_capacity"
	CodeRecovering    = "recovering"
	CodeNotReported   = "no_telemetry_since_start"
	// CodeRecycleLoop: a pool replacing its children after every run.
	CodeRecycleLoop = "pool_recycle_loop"
	// CodeProcessExited: the worker's root process exited and no new
	// incarnation appeared within lost.exit_grace (Reason.Exit says how).
	CodeProcessExited = "process_exited"
)

// Reason is one machine-readable cause of a state, with the evidence that
// made it true.
//
// Value, Threshold, Samples and Since are the figures when the reason fired:
// Value is on the firing side of Threshold. A reason that holds after its
// condition stopped (a memory latch waiting for its recovery samples) is
// Latched, with the value now in Current and the way back in Recovery; only
// a latched reason shows a current value on the other side of its threshold.
type Reason struct {
	// Code is stable and machine-readable: one of the Code* values
	// (docs/health-rules.md lists them all, with their evidence fields).
	Code string `json:"code"`
	// Message is for people.
	Message string `json:"message"`
	// Value and Threshold are the evidence: what was seen when the reason
	// fired, and the limit it was judged against.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Since is when the condition was first seen (this episode).
	Since time.Time `json:"since"`
	// Role is the process role a memory reason is about (RoleMain, ...);
	// empty when it is about the whole tree or not about memory.
	Role string `json:"role,omitempty"`
	// Samples is how many consecutive samples (or, for kills, events) were
	// on the firing side when the reason fired; 0 for a rule that does not
	// count samples.
	Samples int `json:"samples,omitempty"`
	// FiredAt is when the reason became true (the latch, the threshold
	// crossed); zero when the same as Since.
	FiredAt time.Time `json:"fired_at,omitzero"`
	// Latched is true when the reason holds although its condition may no
	// longer: it ends only by Recovery.
	Latched bool `json:"latched,omitempty"`
	// Current is the value now, on a latched reason (nil otherwise).
	Current *float64 `json:"current,omitempty"`
	// Recovery is how far a latched reason is on its way back (nil when
	// not latched).
	Recovery *Recovery `json:"recovery,omitempty"`
	// Incarnation is the id of the incarnation (Incarnation.ID) whose
	// evidence this is, when the worker has one.
	Incarnation string `json:"incarnation,omitempty"`
	// Exit is how the root process ended, on a CodeProcessExited reason.
	Exit *Exit `json:"exit,omitempty"`
}

// Recovery is a latched reason's way back: Samples consecutive samples
// under Ratio of the threshold so far, of Needed.
type Recovery struct {
	Samples int     `json:"samples"`
	Needed  int     `json:"needed"`
	Ratio   float64 `json:"ratio"`
}

// Values of Exit.How.
const (
	ExitCode    = "code"
	ExitSignal  = "signal"
	ExitUnknown = "unknown"
)

// Exit is how a worker's root process ended.
type Exit struct {
	// How is ExitCode (Code is set), ExitSignal (Signal is set) or
	// ExitUnknown (the exit was found by a scrape, not seen in the kernel's
	// process events).
	How    string `json:"how"`
	Code   *int   `json:"code,omitempty"`
	Signal *int   `json:"signal,omitempty"`
	// At is when the root exited (or, for ExitUnknown, when the scrape
	// found it gone).
	At time.Time `json:"at,omitzero"`
	// Incarnation is the id of the incarnation that ended.
	Incarnation string `json:"incarnation,omitempty"`
}

// Text is how the exit reads for people, the same in the process_exited
// reason's message and on the worker's page (whose script says the same):
// "signal 9", "exit code 3" or "exit unknown".
func (e *Exit) Text() string {
	switch {
	case e.How == ExitSignal && e.Signal != nil:
		return "signal " + strconv.Itoa(*e.Signal)
	case e.How == ExitCode && e.Code != nil:
		return "exit code " + strconv.Itoa(*e.Code)
	}
	return "exit unknown"
}

// IncarnationSource is what a worker's incarnation was taken from
// (Incarnation.Source). Its JSON is its name (String): "tree",
// "telemetry_process" or "service_instance_id". A byte, not the name: the
// incarnation held for every worker is 48 bytes, where it took the 64-byte
// size class with a string (docs/results/density.md, "the tracker's
// workers by id, the incarnation's source").
type IncarnationSource uint8

// The incarnation sources (0: none).
const (
	// IncarnationTree: the root process of the worker's tree (the
	// worker_process receiver's AttrPID + AttrProcessCreationTime).
	IncarnationTree IncarnationSource = iota + 1
	// IncarnationProcess: the worker's own telemetry's AttrPID +
	// AttrProcessCreationTime (an SDK's process detector).
	IncarnationProcess
	// IncarnationServiceInstance: the worker's telemetry's
	// AttrServiceInstanceID.
	IncarnationServiceInstance
)

var incarnationSourceNames = [...]string{"", "tree", "telemetry_process", "service_instance_id"}

// String is the source's name ("" for none).
func (s IncarnationSource) String() string {
	if int(s) < len(incarnationSourceNames) {
		return incarnationSourceNames[s]
	}
	return ""
}

// ParseIncarnationSource is the source of this name ("" is none).
func ParseIncarnationSource(name string) (IncarnationSource, bool) {
	for i, n := range incarnationSourceNames {
		if n == name {
			return IncarnationSource(i), true
		}
	}
	return 0, false
}

// MarshalText writes the name.
func (s IncarnationSource) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a name (an error names any other).
func (s *IncarnationSource) UnmarshalText(b []byte) error {
	v, ok := ParseIncarnationSource(string(b))
	if !ok {
		return fmt.Errorf("incarnation source %q: not one of %q, %q, %q", b, IncarnationTree, IncarnationProcess, IncarnationServiceInstance)
	}
	*s = v
	return nil
}

// Incarnation is one life of a worker: its root process (pid + start time),
// or, for a worker known by its telemetry only, what the telemetry says.
// Episodes (memory, CPU) and the kills window belong to one incarnation.
//
// Its JSON "id" is Name(). The processor holds no id for a process it
// knows by its pid (ID ""): the name is made from the pid and start time
// when written, instead of a "pid@start" string held for every worker (32
// bytes a worker: docs/results/density.md, "the incarnation's name made
// when written").
type Incarnation struct {
	// ID is stable for the incarnation: "pid@creation time"
	// (ProcessIncarnationID) or the service.instance.id; "" for a process
	// whose id is its pid and start time (Name makes it).
	ID string `json:"id"`
	// Source is what it was taken from.
	Source IncarnationSource `json:"source"`
	// PID is the root process id (0 when not known).
	PID int64 `json:"pid,omitempty"`
	// Started is when the process started (zero when not known).
	Started Time `json:"started,omitzero"`
	// FirstSeen is when the processor first saw the incarnation.
	FirstSeen Time `json:"first_seen,omitzero"`
}

// ProcessIncarnationID is the id of a process incarnation: its pid, and
// its start time when known ("4242@2026-01-02T03:04:05.000Z", TimeLayout).
func ProcessIncarnationID(pid int64, started Time) string {
	id := strconv.FormatInt(pid, 10)
	if started > 0 {
		id += "@" + started.Time().Format(TimeLayout)
	}
	return id
}

// Name is the incarnation's id: ID, or the process's (ProcessIncarnationID)
// when ID is not held.
func (in *Incarnation) Name() string {
	if in.ID != "" || in.PID <= 0 {
		return in.ID
	}
	return ProcessIncarnationID(in.PID, in.Started)
}

// incarnationJSON is Incarnation without its methods.
type incarnationJSON Incarnation

// MarshalJSON writes the incarnation with its Name as "id".
func (in Incarnation) MarshalJSON() ([]byte, error) {
	j := incarnationJSON(in)
	j.ID = in.Name()
	return json.Marshal(j)
}

// Memory is a worker's memory against its soft limit.
type Memory struct {
	// RSSBytes is the whole tree's resident memory at the last sample.
	RSSBytes int64 `json:"rss_bytes"`
	// SoftLimitBytes is the effective soft limit (0 = none).
	SoftLimitBytes int64 `json:"soft_limit_bytes"`
	// CgroupMaxBytes is the worker's cgroup memory limit where known (0 = none).
	CgroupMaxBytes int64 `json:"cgroup_max_bytes,omitempty"`
	// OverSamples is how many consecutive samples were over the soft limit.
	OverSamples int `json:"over_samples"`
	// SampledAt is when the last memory sample of the tree arrived (zero =
	// never): a lost worker's memory is its last known, not its current.
	SampledAt Time `json:"sampled_at,omitzero"`
	// Roles is the memory of each process role of the tree (RoleMain, the
	// configured roles, RoleChild) at the last sample, sorted by role, each
	// against its own soft limit where one is configured.
	Roles []RoleMemory `json:"roles"`
}

// RoleMemory is one role's memory against its soft limit.
type RoleMemory struct {
	Role string `json:"role"`
	// RSSBytes is the role's resident memory at the last sample.
	RSSBytes int64 `json:"rss_bytes"`
	// SoftLimitBytes is the role's own soft limit (0 = none).
	SoftLimitBytes int64 `json:"soft_limit_bytes"`
	// OverSamples is how many consecutive samples the role was over it.
	OverSamples int `json:"over_samples"`
}

// CPU is the worker's main process CPU use (cpu.go defines the units).
type CPU struct {
	// MainCores is the CPUs' worth of time the main role used over the last
	// interval (utilization x limit; -1 = never reported).
	MainCores float64 `json:"main_cores"`
	// LimitCPUs is the worker's CPU limit (0 = unknown).
	LimitCPUs float64 `json:"limit_cpus"`
}

// Sources says which of the three sources name the worker: its process tree
// (the worker_process receiver), its own telemetry, and the scheduler. A
// worker only one source knows usually means an identity that does not join
// (docs/health-rules.md). Its JSON is an object of the three, "tree",
// "telemetry" and "scheduler", each a Source.
//
// Held compact (NewSources; Tree, Telemetry and Scheduler give each back as
// a Source): the three sources' ids end with the same worker id, held once,
// and their seen flags are bits. As three Source values they were 120
// bytes of every worker's entry in every snapshot; so, 72
// (docs/results/density.md, "the drift behind a pointer, the sources
// compact").
type Sources struct {
	lastSeen [3]Time
	prefixes [3]*[]string // SourceIDs.prefixes of each
	id       string       // SourceIDs.id of all three
	seen     uint8        // bit i: source i seen
}

// The sources' places in Sources.
const (
	sourceTree = iota
	sourceTelemetry
	sourceScheduler
)

// NewSources holds the three sources' views compactly.
func NewSources(tree, telemetry, scheduler Source) Sources {
	all := [3]Source{tree, telemetry, scheduler}
	var s Sources
	for _, src := range all {
		if src.IDs.prefixes != nil && src.IDs.id != "" {
			s.id = src.IDs.id
			break
		}
	}
	for _, src := range all {
		if src.IDs.prefixes != nil && src.IDs.id != s.id {
			// Ids that do not all end with the same worker id (never in a
			// processor's snapshot): every list held whole.
			s.id = ""
			break
		}
	}
	for i, src := range all {
		ids := src.IDs
		if s.id == "" && ids.id != "" {
			ids = IDList(ids.List()...)
		}
		s.lastSeen[i], s.prefixes[i] = src.LastSeen, ids.prefixes
		if src.Seen {
			s.seen |= 1 << i
		}
	}
	return s
}

func (s Sources) get(i int) Source {
	src := Source{Seen: s.seen&(1<<i) != 0, LastSeen: s.lastSeen[i]}
	if s.prefixes[i] != nil {
		src.IDs = SourceIDs{prefixes: s.prefixes[i], id: s.id}
	}
	return src
}

// Tree is the worker's process tree's view (the worker_process receiver).
func (s Sources) Tree() Source { return s.get(sourceTree) }

// Telemetry is the worker's own telemetry's view.
func (s Sources) Telemetry() Source { return s.get(sourceTelemetry) }

// Scheduler is the scheduler's view.
func (s Sources) Scheduler() Source { return s.get(sourceScheduler) }

// sourcesJSON is Sources' JSON.
type sourcesJSON struct {
	Tree      Source `json:"tree"`
	Telemetry Source `json:"telemetry"`
	Scheduler Source `json:"scheduler"`
}

// MarshalJSON writes the three sources, as sourcesJSON is written. By
// hand: through sourcesJSON every worker's JSON paid encoding/json's
// reflection over the three and its check of a marshaller's output twice
// over (BenchmarkWorkerJSON in extension/workerhealthextension/internal/store;
// TestSources holds the bytes equal).
func (s Sources) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 256)
	for i, key := range [...]string{`{"tree":`, `,"telemetry":`, `,"scheduler":`} {
		b = append(b, key...)
		var err error
		if b, err = s.get(i).appendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendJSON appends src's JSON object, as encoding/json writes a Source.
func (src Source) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"seen":`...)
	b = strconv.AppendBool(b, src.Seen)
	if src.LastSeen != 0 { // omitzero
		t, err := src.LastSeen.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"last_seen":`...), t...)
	}
	ids, err := src.IDs.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b = append(append(b, `,"ids":`...), ids...)
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Sources) UnmarshalJSON(b []byte) error {
	var j sourcesJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = NewSources(j.Tree, j.Telemetry, j.Scheduler)
	return nil
}

// Source is one source's view of a worker's identity.
type Source struct {
	// Seen is true once the source named the worker since the processor
	// started (or in the restored checkpoint).
	Seen bool `json:"seen"`
	// LastSeen is the last record of this source about the worker.
	LastSeen Time `json:"last_seen,omitzero"`
	// IDs are the identity attributes and values this source used for the
	// worker, as "key=value" (e.g. "worker_name=w1"), at most a few.
	IDs SourceIDs `json:"ids"`
}

// RunRecord is one recently ended run of a worker, newest first.
type RunRecord struct {
	ID string `json:"id"`
	// Attempt is the attempt's number (1 = the first), when the run was
	// attempted more than once or the sender numbers its attempts; 0 =
	// unknown. A run is (ID, Attempt): each attempt has its own entry.
	Attempt int `json:"attempt,omitempty"`
	// Result is a cicd.pipeline.result value (Result*), or "" when unknown.
	Result string `json:"result"`
	// KillReason is one of KillReasons when the run was killed, else "".
	KillReason string `json:"kill_reason,omitempty"`
	// Started and Ended are the attempt's own timestamps (zero = unknown).
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	// DurationSeconds is Ended - Started (0 when either is unknown).
	DurationSeconds float64 `json:"duration_seconds"`
}

// Runs is what each side believes the worker holds.
type Runs struct {
	// Worker is the run ids the worker reports it holds, sorted.
	Worker []string `json:"worker"`
	// Scheduler is the run ids the scheduler says the worker holds, sorted.
	Scheduler []string `json:"scheduler"`
	// Capacity is the worker's declared capacity (0 = unknown).
	Capacity int `json:"capacity"`
	// Recent is the worker's recently ended runs, newest first (bounded),
	// packed (RecentRuns); its JSON is a list of RunRecord.
	Recent RecentRuns `json:"recent"`
	// Kills counts the worker's killed runs by kill reason since the
	// processor started (restored from the checkpoint), reasons with none
	// left out.
	Kills map[string]int64 `json:"kills"`
}

// Drift is the disagreement between the scheduler and the worker, counting
// only runs older than the grace period. Its JSON is an object of the lists
// and counts below ([] for a list without runs).
//
// Held behind one pointer, nil while there is none (NewDrift): a snapshot
// holds one for every worker, and two lists and three counts were 72 bytes
// of every worker's entry, where most workers have no drift
// (docs/results/density.md, "the drift behind a pointer").
type Drift struct{ d *DriftDetail }

// DriftDetail is a drift's lists and counts.
type DriftDetail struct {
	// Missing: runs the scheduler holds for the worker that it does not hold.
	Missing []string `json:"missing"`
	// Orphaned: runs the worker executes that the scheduler does not list.
	Orphaned []string `json:"orphaned"`
	// MissingCount and OrphanedCount are how many runs are in each kind of
	// drift: the ids above, plus runs a scheduler that states only a count
	// (MetricSchedulerHeld) holds beyond the worker's, whose ids are unknown.
	MissingCount  int `json:"missing_count"`
	OrphanedCount int `json:"orphaned_count"`
	// OverCapacity: runs held beyond the worker's capacity.
	OverCapacity int `json:"over_capacity"`
}

// NewDrift is d as a Drift (none when d has no run and no count; its lists
// are then not kept).
func NewDrift(d DriftDetail) Drift {
	if len(d.Missing) == 0 && len(d.Orphaned) == 0 && d.MissingCount == 0 && d.OrphanedCount == 0 && d.OverCapacity == 0 {
		return Drift{}
	}
	kept := new(DriftDetail) // only here: d itself does not escape, and no drift allocates nothing
	*kept = d
	return Drift{d: kept}
}

// Detail is the drift's lists and counts (the lists [] when empty, never
// nil).
func (d Drift) Detail() DriftDetail {
	out := *d.detail()
	out.Missing, out.Orphaned = emptyIfNil(out.Missing), emptyIfNil(out.Orphaned)
	return out
}

// detail is what d points to, or the zero DriftDetail (read only).
func (d Drift) detail() *DriftDetail {
	if d.d == nil {
		return &noDrift
	}
	return d.d
}

// noDrift is the zero DriftDetail, never written; noDriftJSON its JSON,
// what most workers' drift writes (encoding/json only reads what a
// marshaller returns).
var (
	noDrift        DriftDetail
	noDriftJSON, _ = json.Marshal(Drift{}.Detail())
)

// Missing are the runs the scheduler holds for the worker that it does not
// hold (DriftDetail.Missing; [] for none, as in the JSON).
func (d Drift) Missing() []string { return emptyIfNil(d.detail().Missing) }

// Orphaned are the runs the worker executes that the scheduler does not
// list (DriftDetail.Orphaned; [] for none, as in the JSON).
func (d Drift) Orphaned() []string { return emptyIfNil(d.detail().Orphaned) }

// MissingCount is DriftDetail.MissingCount.
func (d Drift) MissingCount() int { return d.detail().MissingCount }

// OrphanedCount is DriftDetail.OrphanedCount.
func (d Drift) OrphanedCount() int { return d.detail().OrphanedCount }

// OverCapacity is DriftDetail.OverCapacity.
func (d Drift) OverCapacity() int { return d.detail().OverCapacity }

// MarshalJSON writes the lists and counts (DriftDetail).
func (d Drift) MarshalJSON() ([]byte, error) {
	if d.d == nil {
		return noDriftJSON, nil
	}
	return json.Marshal(d.Detail())
}

// UnmarshalJSON reads what MarshalJSON writes (null: none).
func (d *Drift) UnmarshalJSON(b []byte) error {
	var dd DriftDetail
	if err := json.Unmarshal(b, &dd); err != nil {
		return err
	}
	*d = NewDrift(dd)
	return nil
}

func emptyIfNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Worker is one worker's judgement at the time of a snapshot.
type Worker struct {
	ID       string   `json:"id"`
	Name     string   `json:"name,omitempty"`
	State    State    `json:"state"`
	Reasons  []Reason `json:"reasons"`
	Since    Time     `json:"since"`
	LastSeen Time     `json:"last_seen"`
	Memory   Memory   `json:"memory"`
	CPU      CPU      `json:"cpu"`
	Runs     Runs     `json:"runs"`
	Drift    Drift    `json:"drift"`
	Sources  Sources  `json:"sources"`
	// Incarnation is the worker's current incarnation (nil when none is
	// known yet).
	Incarnation *Incarnation `json:"incarnation,omitempty"`
	// LastExit is how the worker's last incarnation ended, where the
	// receiver saw it end (nil otherwise).
	LastExit *Exit `json:"last_exit,omitempty"`
}

// Fleet is the picture across all workers of one processor.
type Fleet struct {
	// ByState counts workers per state.
	ByState map[State]int `json:"by_state"`
	// Pending is the scheduler's pending work (-1 = not reported).
	Pending int64 `json:"pending"`
	// IdleCapacity is free capacity on workers that may take work.
	IdleCapacity int64 `json:"idle_capacity"`
	// IdleWhilePending is true when work was pending while healthy capacity
	// sat idle for the configured number of intervals (Taskcluster #7052).
	IdleWhilePending bool `json:"idle_while_pending"`
}

// Snapshot is one processor's whole judgement. It is immutable once
// published: readers share it without locks.
type Snapshot struct {
	// Source is the processor's component id.
	Source component.ID `json:"-"`
	// Time is when it was evaluated.
	Time time.Time `json:"time"`
	// Workers sorted by ID.
	Workers []Worker `json:"workers"`
	Fleet   Fleet    `json:"fleet"`
}

// Subscriber is implemented by extensions that want the processor's state.
// Publish must be cheap and safe to call from any goroutine; it must not keep
// a reference to anything but the snapshot itself.
type Subscriber interface {
	Publish(snap *Snapshot)
}
