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
)

// event is one mapped record. Strings point into pdata (no copy) until the
// tracker keeps them, which it does only for new workers and runs.
type event struct {
	worker     string
	name       string
	run        string
	result     string
	killReason string
	stage      string
	// ts is the record's own time (unix ns, 0 = unknown): used for durations
	// only; grace periods use the processor's clock so skewed senders cannot
	// create or hide drift.
	ts int64
	// startTS is a span's start (spans carry start and end in one record).
	startTS  int64
	capacity int // -1 = not reported
	kind     kind
	src      source
}

// sample is one worker's metrics from one resource (one scrape): the memory
// of all roles is summed there, so one resource is one sample of the tree.
type sample struct {
	worker    string
	name      string
	mem       int64   // -1 = not in this resource
	cgroupMax int64   // -1 = not in this resource
	cpuMain   float64 // fraction of all CPUs, -1 = not in this resource
	present   int8    // -1 = not in this resource
	capacity  int     // -1 = not in this resource
	active    int     // runs the worker says it holds, -1 = not in this resource
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
