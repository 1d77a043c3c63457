package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"fmt"
	"slices"
	"strings"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// One identity (docs/health-rules.md, "Identity"). Three sources name a
// worker: its process tree (the worker_process receiver, always by
// cicd.worker.id), its own telemetry and the scheduler (by the mapping's id
// attributes, cicd.worker.id always tried last, so the tree joins whatever
// the mapping says). Each worker remembers which sources named it, when, and
// by which attributes; a worker only one source names long after it was
// first seen, while other workers are named by another source, is most
// likely one worker split in two by ids that do not meet: it is reported
// once (a log line naming the ids seen and the workers_unjoined counter).

// seenBy records a record of a source about the worker.
func (t *Tracker) seenBy(w *Worker, o state.Origin, key uint8, now int64) {
	w.Seen(o, key, now)
	t.originAt[o] = now
}

// Unjoined is one report of a worker only one source names.
type Unjoined struct {
	Worker string
	Origin string
	IDs    []string // the ids that source used for it
	Others []string // ids of workers only another source names (at most 5)
}

// checkJoin reports the workers that one source alone has named for
// identity.join_within while another source names other workers.
func (t *Tracker) checkJoin(now int64) []Unjoined {
	within := int64(t.cfg.Identity.JoinWithin)
	var out []Unjoined
	var sorted []*Worker // made once, only when a worker is reported
	for w := range t.workers.all() {
		if w.Unjoined() || w.Evidence == state.EvidenceOnce || now-w.FirstMention < within {
			continue
		}
		n, o := w.Sources()
		if n != 1 || !t.otherOrigin(o, now) {
			continue
		}
		w.ReportUnjoined()
		u := Unjoined{Worker: w.id, Origin: state.OriginNames[o], IDs: t.idsOf(w, o)}
		if sorted == nil {
			sorted = t.byID()
		}
		for _, x := range sorted {
			if len(u.Others) >= 5 {
				break
			}
			if xn, xo := x.Sources(); x != w && xn == 1 && xo != o {
				u.Others = append(u.Others, state.OriginNames[xo]+" "+t.idsOf(x, xo)[0])
			}
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b Unjoined) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

// otherOrigin: some worker was named by a source other than o lately.
func (t *Tracker) otherOrigin(o state.Origin, now int64) bool {
	for x := range state.NOrigins {
		if x != o && t.originAt[x] > 0 && now-t.originAt[x] < int64(t.cfg.Limits.WorkerTTL) {
			return true
		}
	}
	return false
}

// idsOf are the "key=value" ids a source named the worker by.
func (t *Tracker) idsOf(w *Worker, o state.Origin) []string {
	return w.IDs(o, w.id, t.idPrefixes).List()
}

// Message is the log line's text.
func (u Unjoined) Message() string {
	return fmt.Sprintf("worker %s is named only by its %s (%v); its other sources may use other ids", u.Worker, u.Origin, u.IDs)
}
