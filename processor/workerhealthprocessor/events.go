package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

// source is whose view a record is: the worker's own or the scheduler's.
type source uint8

const (
	srcWorker source = iota
	srcScheduler
)

// kind is a run lifecycle event kind after mapping.
type kind uint8

const (
	// evSeen: any record from the worker (not a lifecycle event): it is alive.
	evSeen kind = iota
	evClaimed
	evStarted
	evFinished
	evKilled
	evReleased
	evHeartbeat
	// evStage: a stage span of a run (compile, execute...).
	evStage
	// evSnapshot: a scheduler states every run it holds for the worker
	// (snapRuns).
	evSnapshot
	// evHeldCount: a scheduler states how many runs it holds for the
	// worker (held).
	evHeldCount
)

// noKey: the record named its worker by no id attribute (the worker was
// known from elsewhere, e.g. the previous record's resource).
const noKey = 255

// event is one mapped record. Strings point into pdata (no copy) until the
// tracker keeps them, which it does only for new workers and runs.
type event struct {
	worker     string
	name       string
	run        string
	result     string
	killReason string
	stage      string
	// snapRuns: the run ids of an evSnapshot.
	snapRuns []string
	// ts is the record's own time (unix ns, 0 = unknown): used for durations
	// only; grace periods use the processor's clock so skewed senders cannot
	// create or hide drift.
	ts int64
	// startTS is a span's start (spans carry start and end in one record).
	startTS  int64
	capacity int // -1 = not reported
	held     int // evHeldCount's count
	kind     kind
	src      source
	// sched is the scheduler source's index (config schedulers()) of a
	// scheduler's record; key the index (config idKeys()) of the attribute
	// that named the worker, or noKey.
	sched, key uint8
}

// maxSampleRoles bounds the roles one sample keeps apart (the receiver
// sends main, the configured roles and the default one); more are still in
// the tree's total.
const maxSampleRoles = 8

// roleVal is one role's memory in a sample.
type roleVal struct {
	role string
	rss  int64
}

// sample is one worker's metrics from one resource (one scrape): the memory
// of all roles is summed there, so one resource is one sample of the tree.
type sample struct {
	worker    string
	name      string
	mem       int64   // -1 = not in this resource
	cgroupMax int64   // -1 = not in this resource
	cpuMain   float64 // a fraction of the worker's CPU limit, -1 = not in this resource
	cpuLimit  float64 // CPUs the worker may use, -1 = not in this resource
	oomKills  int64   // cumulative, -1 = not in this resource
	exitMain  int64   // cumulative exits of the main role, -1 = not in this resource
	exitChild int64   // cumulative exits of the child roles, -1 = not in this resource
	present   int8    // -1 = not in this resource
	capacity  int     // -1 = not in this resource
	active    int     // runs the worker says it holds, -1 = not in this resource
	// tree: the resource is the worker_process receiver's (it carries
	// metrics.present), not the worker's own telemetry.
	tree  bool
	key   uint8
	roles [maxSampleRoles]roleVal
	nrole int
}

// newSample is a sample with nothing in it yet.
func newSample(worker, name string, key uint8) sample {
	return sample{
		worker: worker, name: name, key: key, mem: -1, cgroupMax: -1, cpuMain: -1, cpuLimit: -1,
		oomKills: -1, exitMain: -1, exitChild: -1, present: -1, capacity: -1, active: -1,
	}
}

// batch is what one Consume call extracts; pooled so the pass-through path
// does not allocate.
type batch struct {
	events  []event
	samples []sample
	// pending is the scheduler's pending gauge (-1 = not in this batch).
	pending int64
	// schedulerSeen: the batch held a scheduler record, so drift may be judged.
	schedulerSeen bool
	malformed     int64
}

func (b *batch) reset() {
	b.events = b.events[:0]
	b.samples = b.samples[:0]
	b.pending = -1
	b.schedulerSeen = false
	b.malformed = 0
}
