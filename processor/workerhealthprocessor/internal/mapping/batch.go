package mapping

// Side is whose view a record is: the worker's own or the scheduler's.
type Side uint8

const (
	SideWorker Side = iota
	SideScheduler
)

// Kind is a run lifecycle event kind after mapping.
type Kind uint8

const (
	// KindSeen: any record from the worker (not a lifecycle event): it is alive.
	KindSeen Kind = iota
	KindClaimed
	KindStarted
	KindFinished
	KindKilled
	KindReleased
	KindHeartbeat
	// KindStage: a stage span of a run (compile, execute...).
	KindStage
	// KindSnapshot: a scheduler states every run it holds for the worker
	// (SnapRuns).
	KindSnapshot
	// KindHeldCount: a scheduler states how many runs it holds for the
	// worker (Held).
	KindHeldCount
)

// NoKey: the record named its worker by no id attribute (the worker was
// known from elsewhere, e.g. the previous record's resource).
const NoKey = 255

// IncRef is what a worker's resource says of its incarnation: its root
// process (pid and start time) or its service.instance.id; and, on a tree's
// resource whose root ended, when and how it exited
// (docs/health-rules.md, "Incarnations").
type IncRef struct {
	PID     int64 // process.pid, 0 = not stated
	Started int64 // process.creation.time, unix ns, 0 = not stated
	// ServiceInstance is service.instance.id ("" = not stated).
	ServiceInstance string
	ExitAt          int64 // process.exit.time, unix ns, 0 = not stated
	ExitCode        int64 // process.exit.code, -1 = not stated (when ExitAt is)
	ExitSignal      int64 // workerwatch.process.exit.signal, 0 = not stated
}

// Event is one mapped record. Strings point into pdata (no copy) until the
// tracker keeps them, which it does only for new workers and runs.
type Event struct {
	Worker     string
	Name       string
	Run        string
	Result     string
	KillReason string
	Stage      string
	// SnapRuns: the run ids of a KindSnapshot.
	SnapRuns []string
	// TS is the record's own time (unix ns, 0 = unknown): used for durations
	// only; grace periods use the processor's clock so skewed senders cannot
	// create or hide drift.
	TS int64
	// StartTS is a span's start (spans carry start and end in one record).
	StartTS  int64
	Capacity int // -1 = not reported
	Held     int // KindHeldCount's count
	Kind     Kind
	Src      Side
	// Sched is the scheduler source's index (Settings.Schedulers) of a
	// scheduler's record; Key the index (Settings.IDKeys) of the attribute
	// that named the worker, or NoKey.
	Sched, Key uint8
	// Attempt is the run's attempt number the record states
	// (workerwatch.run.attempt), 0 = not stated.
	Attempt int
	// Inc is the worker's incarnation its resource states (KindSeen only:
	// one per resource).
	Inc IncRef
}

// MaxSampleRoles bounds the roles one sample keeps apart (the receiver
// sends main, the configured roles and the default one); more are still in
// the tree's total.
const MaxSampleRoles = 8

// RoleVal is one role's memory in a sample.
type RoleVal struct {
	Role string
	RSS  int64
}

// Sample is one worker's metrics from one resource (one scrape): the memory
// of all roles is summed there, so one resource is one sample of the tree.
type Sample struct {
	Worker    string
	Name      string
	Mem       int64   // -1 = not in this resource
	CgroupMax int64   // -1 = not in this resource
	CPUMain   float64 // a fraction of the worker's CPU limit, -1 = not in this resource
	CPULimit  float64 // CPUs the worker may use, -1 = not in this resource
	OOMKills  int64   // cumulative, -1 = not in this resource
	ExitMain  int64   // cumulative exits of the main role, -1 = not in this resource
	ExitChild int64   // cumulative exits of the child roles, -1 = not in this resource
	Present   int8    // -1 = not in this resource
	Capacity  int     // -1 = not in this resource
	Active    int     // runs the worker says it holds, -1 = not in this resource
	// Tree: the resource is the worker_process receiver's (it carries
	// metrics.present), not the worker's own telemetry.
	Tree bool
	// Inc is the incarnation the resource states.
	Inc   IncRef
	Key   uint8
	Roles [MaxSampleRoles]RoleVal
	NRole int
}

// NewSample is a sample with nothing in it yet.
func NewSample(worker, name string, key uint8) Sample {
	return Sample{
		Worker: worker, Name: name, Key: key, Mem: -1, CgroupMax: -1, CPUMain: -1, CPULimit: -1,
		OOMKills: -1, ExitMain: -1, ExitChild: -1, Present: -1, Capacity: -1, Active: -1,
	}
}

// Batch is what one Consume call extracts; pooled so the pass-through path
// does not allocate.
type Batch struct {
	Events  []Event
	Samples []Sample
	// Pending is the scheduler's pending gauge (-1 = not in this batch).
	Pending int64
	// SchedulerSeen: the batch held a scheduler record, so drift may be judged.
	SchedulerSeen bool
	Malformed     int64
}

// NewBatch is an empty batch.
func NewBatch() *Batch {
	b := &Batch{}
	b.Reset()
	return b
}

// Reset empties the batch for its next use (the pool keeps its slices).
func (b *Batch) Reset() {
	b.Events = b.Events[:0]
	b.Samples = b.Samples[:0]
	b.Pending = -1
	b.SchedulerSeen = false
	b.Malformed = 0
}
