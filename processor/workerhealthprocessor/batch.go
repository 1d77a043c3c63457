package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"

// What the mapping (internal/mapping) hands the tracker: one batch per
// Consume call, of events and samples, each from one side.
type (
	batch  = mapping.Batch
	event  = mapping.Event
	sample = mapping.Sample
	source = mapping.Side
)

const (
	srcWorker    = mapping.SideWorker
	srcScheduler = mapping.SideScheduler
	noKey        = mapping.NoKey
)

// The kinds of event the tracker applies.
const (
	evSeen      = mapping.KindSeen
	evClaimed   = mapping.KindClaimed
	evStarted   = mapping.KindStarted
	evFinished  = mapping.KindFinished
	evKilled    = mapping.KindKilled
	evReleased  = mapping.KindReleased
	evHeartbeat = mapping.KindHeartbeat
	evStage     = mapping.KindStage
	evSnapshot  = mapping.KindSnapshot
	evHeldCount = mapping.KindHeldCount
)
