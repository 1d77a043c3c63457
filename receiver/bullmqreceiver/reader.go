package bullmqreceiver // import "github.com/workerwatch/workerwatch/receiver/bullmqreceiver"

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/receiver/bullmqreceiver/internal/metadata"
)

// BullMQ's names (BullMQ 6.x, src/commands/*.lua): each queue's keys are
// <prefix>:<queue>:<suffix>; a job's hash is <prefix>:<queue>:<id>, with the
// fields below.
const (
	fieldProcessedBy    = "pb"           // the Worker's `name` (prepareJobForProcessing.lua)
	fieldAttemptsStart  = "ats"          // attempts started (HINCRBY at each move to active)
	fieldFailedReason   = "failedReason" // the last failure's text
	workerClientSuffix  = ":w:"          // a named worker's CLIENT SETNAME: <prefix>:<base64 queue>:w:<name>
	streamFieldEvent    = "event"
	streamFieldJobID    = "jobId"
	streamFieldPrev     = "prev"
	streamFieldReason   = "failedReason"
	eventActive         = "active"
	eventCompleted      = "completed"
	eventFailed         = "failed"
	eventStalled        = "stalled"
	eventWaiting        = "waiting"
	eventDelayed        = "delayed"
	attrQueue           = "bullmq.queue.name"
	attrJobID           = "bullmq.job.id"
	attrJobState        = "bullmq.job.state"
	attrJobFailedReason = "bullmq.job.failed.reason"
	attrWorkerName      = "bullmq.worker.name"
	attrStreamID        = "bullmq.event.id"
)

// queueState is what the receiver keeps per queue between polls.
type queueState struct {
	name string
	// keyPrefix is "<prefix>:<queue>:".
	keyPrefix string
	// The queue's keys each poll reads, built once.
	keyEvents, keyActive, keyMeta, keyID string
	// keyCounts[i] is the key of countKeys[i].
	keyCounts [len(countKeys)]string
	// encoded is the queue's name as its named workers' connections carry
	// it (CLIENT SETNAME <prefix>:<base64 queue>:w:<name>).
	encoded string
	// lastID is the events stream position: the id of the last entry read.
	lastID string
	// positioned: lastID was loaded or set (from storage or the stream's end).
	positioned bool
	// held: run id -> worker, for the runs the receiver stated started and
	// not ended (to attribute a stalled event, and not to restate a start).
	held map[string]string
	// jobRun: job id -> the run id and worker of its latest attempt the
	// receiver saw.
	jobRun map[string]runRef
	// stated: the workers the last snapshot named (a worker no longer
	// named gets one empty snapshot).
	stated map[string]bool
	// failing: the last error of this queue (logged once until it clears).
	failing string
	// overActive: more active jobs than max_active_jobs (logged once).
	overActive bool
}

type runRef struct{ run, worker string }

func newQueueState(prefix, name string) *queueState {
	q := &queueState{
		name:      name,
		keyPrefix: prefix + ":" + name + ":",
		encoded:   base64.StdEncoding.EncodeToString([]byte(name)),
		held:      map[string]string{},
		jobRun:    map[string]runRef{},
		stated:    map[string]bool{},
	}
	q.keyEvents, q.keyActive, q.keyMeta, q.keyID = q.key("events"), q.key("active"), q.key("meta"), q.key("id")
	for i, k := range countKeys {
		q.keyCounts[i] = q.key(k.suffix)
	}
	return q
}

func (q *queueState) key(suffix string) string { return q.keyPrefix + suffix }

// runID is the run id of a job's attempt: the job id for the first attempt,
// "<id>#<n>" for the n-th (a stalled job run again, a retry), so every
// execution is a run of its own. Job ids are unique within a queue only.
func runID(jobID string, attempt int) string {
	if attempt <= 1 {
		return jobID
	}
	return jobID + "#" + strconv.Itoa(attempt)
}

// attemptOf is the attempt a run id (runID) is of: 1 for the job id itself,
// n for "<id>#<n>".
// It is read once per record: no string is built.
func attemptOf(jobID, run string) int {
	rest, ok := strings.CutPrefix(run, jobID)
	if n, isRun := strings.CutPrefix(rest, "#"); ok && isRun {
		if a, err := strconv.Atoi(n); err == nil && a > 1 {
			return a
		}
	}
	return 1
}

// jobInfo is what one HMGET of a job's hash says.
type jobInfo struct {
	worker  string
	attempt int
	reason  string
	// later: the `active` entries of the job still to come in this read.
	later int
}

// countKeys are the lists and sets whose lengths are a queue's counts
// (bullmq.queue.jobs by state).
var countKeys = [...]struct {
	state  metadata.AttributeState
	suffix string
	zset   bool
}{
	{metadata.AttributeStateWaiting, "wait", false},
	{metadata.AttributeStatePrioritized, "prioritized", true},
	{metadata.AttributeStateDelayed, "delayed", true},
	{metadata.AttributeStateActive, "active", false},
	{metadata.AttributeStatePaused, "paused", false},
	{metadata.AttributeStateWaitingChildren, "waiting-children", true},
	{metadata.AttributeStateCompleted, "completed", true},
	{metadata.AttributeStateFailed, "failed", true},
}

// countActive is the index of the active list's length in countKeys.
const countActive = 3

// pollResult is one queue's poll, to be emitted.
type pollResult struct {
	// counts[i] is the length of countKeys[i].
	counts  [len(countKeys)]int64
	workers int
}

// queueError names the queue and the key a failure is about.
type queueError struct {
	queue, key string
	err        error
}

func (e *queueError) Error() string {
	return fmt.Sprintf("queue %q, key %q: %v", e.queue, e.key, e.err)
}

func (e *queueError) Unwrap() error { return e.err }

var errNoQueue = errors.New("no such queue (none of its keys exist: check the queue name and prefix)")

// pollQueue reads one queue: its new stream entries, its active jobs and
// who holds them, its counts. It appends the worker-side records to wl
// (one resource per worker), the scheduler-side records to sl; workers are
// the names of the queue's connected workers (CLIENT LIST).
func (r *bullReceiver) pollQueue(ctx context.Context, q *queueState, workers []string, sl plog.LogRecordSlice, wl *workerLogs, now pcommon.Timestamp) (pollResult, error) {
	res := pollResult{}
	c := r.client
	if !q.positioned {
		if err := r.position(ctx, q); err != nil {
			return res, err
		}
	}

	// One round trip: the stream since the position, the active list, the
	// counts, and whether the queue exists at all.
	pipe := c.Pipeline()
	xr := pipe.XRead(ctx, &redis.XReadArgs{Streams: []string{q.keyEvents, q.lastID}, Count: int64(r.cfg.MaxEventsPerPoll), Block: -1})
	active := pipe.LRange(ctx, q.keyActive, 0, int64(r.cfg.MaxActiveJobs)-1)
	var counts [len(countKeys)]*redis.IntCmd
	for i, k := range countKeys {
		if k.zset {
			counts[i] = pipe.ZCard(ctx, q.keyCounts[i])
		} else {
			counts[i] = pipe.LLen(ctx, q.keyCounts[i])
		}
	}
	exists := pipe.Exists(ctx, q.keyMeta, q.keyEvents, q.keyID)
	_, err := pipe.Exec(ctx)
	r.tel.commands(ctx, int64(3+len(countKeys)))
	// Exec returns the first error, which may be XREAD's redis.Nil (nothing
	// new): each command's own error names its key.
	if e := xr.Err(); e != nil && !errors.Is(e, redis.Nil) {
		return res, &queueError{q.name, q.keyEvents, e}
	}
	if e := active.Err(); e != nil && !errors.Is(e, redis.Nil) {
		return res, &queueError{q.name, q.keyActive, e}
	}
	if e := exists.Err(); e != nil && !errors.Is(e, redis.Nil) {
		return res, &queueError{q.name, q.keyMeta, e}
	}
	for i, cmd := range counts {
		if e := cmd.Err(); e != nil {
			return res, &queueError{q.name, q.keyCounts[i], e}
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return res, &queueError{q.name, q.keyEvents, err}
	}
	if exists.Val() == 0 && len(active.Val()) == 0 {
		return res, &queueError{q.name, q.keyMeta, errNoQueue}
	}

	var entries []redis.XMessage
	if streams := xr.Val(); len(streams) > 0 {
		entries = streams[0].Messages
	}
	r.tel.eventsRead(ctx, int64(len(entries)))

	// One more round trip: the hash of every job named by an entry or
	// listed as active whose holder is not known yet. need[id] counts the
	// job's `active` entries in this read.
	activeIDs := active.Val()
	need := map[string]int{}
	for _, e := range entries {
		if id, _ := e.Values[streamFieldJobID].(string); id != "" {
			n := need[id]
			if ev, _ := e.Values[streamFieldEvent].(string); ev == eventActive {
				n++
			}
			need[id] = n
		}
	}
	for _, id := range activeIDs {
		if _, named := need[id]; !named {
			if _, known := q.jobRun[id]; !known {
				need[id] = 0
			}
		}
	}
	info := map[string]jobInfo{}
	if len(need) > 0 {
		ids := make([]string, 0, len(need))
		for id := range need {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		p2 := c.Pipeline()
		cmds := make([]*redis.SliceCmd, len(ids))
		for i, id := range ids {
			cmds[i] = p2.HMGet(ctx, q.key(id), fieldProcessedBy, fieldAttemptsStart, fieldFailedReason)
		}
		_, err := p2.Exec(ctx)
		r.tel.commands(ctx, int64(len(ids)))
		for i, cmd := range cmds {
			if e := cmd.Err(); e != nil && !errors.Is(e, redis.Nil) {
				return res, &queueError{q.name, q.key(ids[i]), e}
			}
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return res, &queueError{q.name, q.key(ids[0]), err}
		}
		for i, cmd := range cmds {
			v := cmd.Val()
			ji := jobInfo{}
			if len(v) == 3 {
				ji.worker, _ = v[0].(string)
				if s, _ := v[1].(string); s != "" {
					ji.attempt, _ = strconv.Atoi(s)
				}
				ji.reason, _ = v[2].(string)
			}
			// A job's hash says its latest attempt: an `active` entry
			// followed by more of the same job in this read is an earlier
			// attempt.
			ji.later = max(need[ids[i]]-1, 0)
			info[ids[i]] = ji
		}
	}

	// The stream's entries, in order.
	full := len(entries) == r.cfg.MaxEventsPerPoll
	for i, e := range entries {
		if isBackToWait(e) {
			if i+1 == len(entries) && full {
				// A stall writes this entry and its `stalled` entry in one
				// script: read both at the next poll.
				break
			}
			if i+1 < len(entries) && isStallOf(entries[i+1], e) {
				q.lastID = e.ID
				continue // the stalled entry that follows says it
			}
		}
		r.entry(q, e, info, sl, wl)
		q.lastID = e.ID
	}
	if len(entries) > 0 {
		r.savePosition(ctx, q)
	}

	// More active jobs than max_active_jobs: a partial list would show the
	// jobs left out as taken from their workers, so no snapshot is stated
	// (the processor lets the last one go after three intervals).
	if n := counts[countActive].Val(); n > int64(r.cfg.MaxActiveJobs) {
		if !q.overActive {
			q.overActive = true
			r.set.Logger.Warn("More active jobs than max_active_jobs: no snapshot of who holds what is stated for this queue",
				zap.String("queue", q.name), zap.String("key", q.keyActive), zap.Int64("active", n), zap.Int("max_active_jobs", r.cfg.MaxActiveJobs))
		}
		return r.counted(res, counts, workers), nil
	}
	q.overActive = false

	// The snapshot: the active jobs under each worker, every connected
	// worker stated (holding nothing says so), and a worker named last
	// time and no longer stated once more with nothing.
	byWorker := map[string][]string{}
	for _, w := range workers {
		byWorker[w] = []string{}
	}
	for _, id := range activeIDs {
		ref, known := q.jobRun[id]
		if ji, read := info[id]; read && (!known || ji.worker != ref.worker || runID(id, ji.attempt) != ref.run) {
			if ji.worker == "" {
				continue // an unnamed Worker's job: no one to hold it
			}
			ref = runRef{run: runID(id, ji.attempt), worker: ji.worker}
			q.jobRun[id] = ref
		} else if !known {
			continue
		}
		byWorker[ref.worker] = append(byWorker[ref.worker], ref.run)
		if q.held[ref.run] != ref.worker {
			// Active in Redis and never stated started (taken before the
			// receiver ran, between two reads, or in a stretch of the stream
			// that was trimmed): the snapshot's run starts now.
			q.held[ref.run] = ref.worker
			r.workerRecord(wl, ref.worker, contract.EventStarted, q, id, ref.run, now, nil)
		}
	}
	for w := range q.stated {
		if _, ok := byWorker[w]; !ok {
			byWorker[w] = []string{}
			delete(q.stated, w)
		}
	}
	names := make([]string, 0, len(byWorker))
	for w := range byWorker {
		names = append(names, w)
	}
	slices.Sort(names)
	for _, w := range names {
		runs := byWorker[w]
		slices.Sort(runs)
		lr := sl.AppendEmpty()
		lr.SetTimestamp(now)
		lr.SetObservedTimestamp(now)
		lr.SetEventName(contract.EventSchedulerSnapshot)
		a := lr.Attributes()
		a.PutStr(contract.AttrWorkerID, w)
		a.PutStr(attrWorkerName, w)
		a.PutStr(attrQueue, q.name)
		s := a.PutEmptySlice(contract.AttrSchedulerRuns)
		s.EnsureCapacity(len(runs))
		for _, id := range runs {
			s.AppendEmpty().SetStr(id)
		}
		if len(runs) > 0 || slices.Contains(workers, w) {
			q.stated[w] = true
		}
	}
	// Forget the attempts of jobs no longer active and no longer held.
	if len(q.jobRun) > 4*len(activeIDs)+1024 {
		act := map[string]bool{}
		for _, id := range activeIDs {
			act[id] = true
		}
		for id, ref := range q.jobRun {
			if !act[id] && q.held[ref.run] == "" {
				delete(q.jobRun, id)
			}
		}
	}

	return r.counted(res, counts, workers), nil
}

// counted fills a poll's counts.
func (r *bullReceiver) counted(res pollResult, counts [len(countKeys)]*redis.IntCmd, workers []string) pollResult {
	for i, cmd := range counts {
		res.counts[i] = cmd.Val()
	}
	res.workers = len(workers)
	return res
}

// entry turns one stream entry into records.
func (r *bullReceiver) entry(q *queueState, e redis.XMessage, info map[string]jobInfo, sl plog.LogRecordSlice, wl *workerLogs) {
	ev, _ := e.Values[streamFieldEvent].(string)
	id, _ := e.Values[streamFieldJobID].(string)
	if id == "" {
		return
	}
	ts := streamTime(e.ID)
	ji := info[id]
	switch ev {
	case eventActive:
		if ji.worker == "" {
			return
		}
		attempt := max(ji.attempt-ji.later, 1)
		if ji.later > 0 {
			ji.later--
			info[id] = ji
		}
		ref := runRef{run: runID(id, attempt), worker: ji.worker}
		if old, ok := q.jobRun[id]; ok && old.run == ref.run {
			ref.worker = old.worker
		} else if ok {
			// A new attempt: the receiver forgets the old one (the
			// processor keeps it on its worker until that worker ends it or
			// drift.heal_after lets it go).
			delete(q.held, old.run)
		}
		q.jobRun[id] = ref
		if q.held[ref.run] == ref.worker {
			return // already stated by a snapshot
		}
		q.held[ref.run] = ref.worker
		r.workerRecord(wl, ref.worker, contract.EventStarted, q, id, ref.run, ts, func(a pcommon.Map) {
			a.PutStr(attrStreamID, e.ID)
		})
	case eventCompleted, eventFailed:
		ref, ok := q.jobRun[id]
		if !ok || (ji.worker != "" && ji.worker != ref.worker) {
			if ji.worker == "" {
				return // a job no named worker ran (or removed before this read)
			}
			ref = runRef{run: runID(id, max(ji.attempt, 1)), worker: ji.worker}
		}
		delete(q.held, ref.run)
		reason, _ := e.Values[streamFieldReason].(string)
		r.workerRecord(wl, ref.worker, contract.EventFinished, q, id, ref.run, ts, func(a pcommon.Map) {
			a.PutStr(attrStreamID, e.ID)
			if ev == eventCompleted {
				a.PutStr(contract.AttrResult, contract.ResultSuccess)
				a.PutStr(attrJobState, "completed")
				return
			}
			a.PutStr(contract.AttrResult, contract.ResultFailure)
			a.PutStr(attrJobState, "failed")
			if reason != "" {
				a.PutStr(attrJobFailedReason, reason)
			}
		})
	case eventWaiting, eventDelayed:
		// The worker's attempt ended without an end of the job: BullMQ
		// retries a failed attempt (retryJob: `waiting`, prev "active";
		// moveToDelayed with a backoff: `delayed`), or the worker gave the
		// job back (moveJobFromActiveToWait). A stall's `waiting` never
		// gets here (pollQueue hands it to its `stalled` entry). Only a job
		// the receiver saw running on a worker counts.
		prev, _ := e.Values[streamFieldPrev].(string)
		ref, ok := q.jobRun[id]
		if !ok || q.held[ref.run] != ref.worker || (ev == eventWaiting && prev != eventActive) {
			return
		}
		delete(q.held, ref.run)
		if ji.reason == "" {
			// Given back without a failure.
			r.workerRecord(wl, ref.worker, contract.EventReleased, q, id, ref.run, ts, func(a pcommon.Map) {
				a.PutStr(attrStreamID, e.ID)
				a.PutStr(attrJobState, ev)
			})
			return
		}
		r.workerRecord(wl, ref.worker, contract.EventFinished, q, id, ref.run, ts, func(a pcommon.Map) {
			a.PutStr(attrStreamID, e.ID)
			a.PutStr(contract.AttrResult, contract.ResultFailure)
			a.PutStr(attrJobState, "retrying")
			a.PutStr(attrJobFailedReason, ji.reason)
		})
	case eventStalled:
		// BullMQ's stalled checker found the job's lock lapsed and moved it
		// back to wait: the worker that held it stopped renewing the lock
		// (hung, or dead). Its run stays held on its side: if it is alive it
		// may still finish the job, a second execution (orphaned drift).
		ref, ok := q.jobRun[id]
		if !ok {
			return
		}
		lr := sl.AppendEmpty()
		lr.SetTimestamp(ts)
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(time.Now()))
		lr.SetEventName(contract.EventRunStalled)
		lr.SetSeverityNumber(plog.SeverityNumberWarn)
		lr.Body().SetStr(fmt.Sprintf("job %s of queue %s stalled: its lock held by worker %s lapsed", id, q.name, ref.worker))
		a := lr.Attributes()
		a.PutStr(contract.AttrWorkerID, ref.worker)
		a.PutStr(attrWorkerName, ref.worker)
		a.PutStr(contract.AttrRunID, ref.run)
		a.PutStr(attrJobID, id)
		a.PutStr(attrQueue, q.name)
		a.PutStr(attrStreamID, e.ID)
	}
}

// isBackToWait: a job moved from active back to wait (a stall, a retry, a
// job given back).
func isBackToWait(e redis.XMessage) bool {
	ev, _ := e.Values[streamFieldEvent].(string)
	prev, _ := e.Values[streamFieldPrev].(string)
	return ev == eventWaiting && prev == eventActive
}

// isStallOf: next is the `stalled` entry of e's job.
func isStallOf(next, e redis.XMessage) bool {
	ev, _ := next.Values[streamFieldEvent].(string)
	return ev == eventStalled && next.Values[streamFieldJobID] == e.Values[streamFieldJobID]
}

// workerLogs are a poll's worker-side records: one resource per worker in
// the poll's logs, added at its first record.
type workerLogs struct {
	ld       plog.Logs
	byWorker map[string]plog.LogRecordSlice
}

func newWorkerLogs(ld plog.Logs) *workerLogs {
	return &workerLogs{ld: ld, byWorker: map[string]plog.LogRecordSlice{}}
}

// of is the records of worker's resource.
func (wl *workerLogs) of(worker string) plog.LogRecordSlice {
	if lrs, ok := wl.byWorker[worker]; ok {
		return lrs
	}
	rl := wl.ld.ResourceLogs().AppendEmpty()
	a := rl.Resource().Attributes()
	a.PutStr(attrWorkerName, worker)
	a.PutStr(contract.AttrWorkerID, worker)
	s := rl.ScopeLogs().AppendEmpty()
	s.Scope().SetName(scopeName)
	lrs := s.LogRecords()
	wl.byWorker[worker] = lrs
	return lrs
}

// workerRecord appends one record of a worker's run to that worker's
// resource (the worker's own view of its runs, as BullMQ's stream states it).
func (r *bullReceiver) workerRecord(wl *workerLogs, worker, event string, q *queueState, jobID, run string, ts pcommon.Timestamp, more func(pcommon.Map)) {
	lr := wl.of(worker).AppendEmpty()
	lr.SetTimestamp(ts)
	lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(time.Now()))
	lr.SetEventName(event)
	a := lr.Attributes()
	a.PutStr(contract.AttrRunID, run)
	a.PutInt(contract.AttrRunAttempt, int64(attemptOf(jobID, run)))
	a.PutStr(attrJobID, jobID)
	a.PutStr(attrQueue, q.name)
	a.PutStr(attrWorkerName, worker)
	if more != nil {
		more(a)
	}
}

// streamTime is a stream entry id's time (its milliseconds part).
func streamTime(id string) pcommon.Timestamp {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return pcommon.NewTimestampFromTime(time.Now())
	}
	return pcommon.NewTimestampFromTime(time.UnixMilli(n))
}

// streamLess compares two stream ids.
func streamLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseUint(am, 10, 64)
	bi, _ := strconv.ParseUint(bm, 10, 64)
	if ai != bi {
		return ai < bi
	}
	ax, _ := strconv.ParseUint(as, 10, 64)
	bx, _ := strconv.ParseUint(bs, 10, 64)
	return ax < bx
}

// position sets a queue's stream position: the one kept in storage, or the
// stream's end. A kept position older than the stream's oldest entry means
// BullMQ trimmed events never read: said, counted, and the snapshot restates
// what is active.
func (r *bullReceiver) position(ctx context.Context, q *queueState) error {
	kept := r.loadPosition(ctx, q)
	if kept != "" {
		first, err := r.client.XRangeN(ctx, q.keyEvents, "-", "+", 1).Result()
		r.tel.commands(ctx, 1)
		if err != nil && !errors.Is(err, redis.Nil) {
			return &queueError{q.name, q.keyEvents, err}
		}
		if len(first) > 0 && streamLess(kept, first[0].ID) {
			r.tel.gap(ctx)
			r.set.Logger.Warn("The events stream was trimmed past the kept position: job events between the two may be lost; the active jobs are restated from Redis",
				zap.String("queue", q.name), zap.String("key", q.keyEvents),
				zap.String("kept_position", kept), zap.String("oldest_entry", first[0].ID))
		} else {
			r.set.Logger.Info("Resuming the events stream", zap.String("queue", q.name), zap.String("position", kept))
		}
		q.lastID, q.positioned = kept, true
		return nil
	}
	last, err := r.client.XRevRangeN(ctx, q.keyEvents, "+", "-", 1).Result()
	r.tel.commands(ctx, 1)
	if err != nil && !errors.Is(err, redis.Nil) {
		return &queueError{q.name, q.keyEvents, err}
	}
	q.lastID = "0-0"
	if len(last) > 0 {
		q.lastID = last[0].ID
	}
	q.positioned = true
	// Kept at once: a restart before the next event must not start at the
	// stream's end again and miss what came in between.
	r.savePosition(ctx, q)
	return nil
}

// connectedWorkers reads CLIENT LIST (every node of a cluster) for the
// connected BullMQ workers of every queue: by the queue's encoded name
// (queueState.encoded), the worker names sorted, each once.
func (r *bullReceiver) connectedWorkers(ctx context.Context) (map[string][]string, error) {
	var lists []string
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		// ForEachShard calls back from one goroutine per node: appended
		// under a lock, so no node count can fill a buffer and block it.
		var mu sync.Mutex
		err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			s, err := c.ClientList(ctx).Result()
			if err == nil {
				mu.Lock()
				lists = append(lists, s)
				mu.Unlock()
			}
			return err
		})
		r.tel.commands(ctx, int64(len(lists)))
		if err != nil {
			return nil, err
		}
	} else {
		s, err := r.client.ClientList(ctx).Result()
		r.tel.commands(ctx, 1)
		if err != nil {
			return nil, err
		}
		lists = append(lists, s)
	}
	return workersByQueue(r.cfg.Prefix, lists), nil
}

// workersByQueue picks the named BullMQ workers out of CLIENT LIST replies,
// one connection a line ("id=7 addr=... name=<n> age=..."; a name has no
// spaces): a worker's connections are named <prefix>:<base64 queue>:w:<name>
// (base64 has no ':'). Keyed by the base64 queue name; names sorted, each
// once (a worker has several connections).
func workersByQueue(prefix string, lists []string) map[string][]string {
	pfx := prefix + ":"
	byQueue := map[string][]string{}
	for _, l := range lists {
		for line := range strings.SplitSeq(l, "\n") {
			_, name, ok := strings.Cut(line, " name=")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, " ")
			rest, ok := strings.CutPrefix(name, pfx)
			if !ok {
				continue
			}
			if enc, w, ok := strings.Cut(rest, workerClientSuffix); ok && w != "" {
				byQueue[enc] = append(byQueue[enc], w)
			}
		}
	}
	for enc, ws := range byQueue {
		slices.Sort(ws)
		byQueue[enc] = slices.Compact(ws)
	}
	return byQueue
}
