package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"fmt"
	"slices"
	"strings"

	"github.com/workerwatch/workerwatch/internal/contract"
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

// origin is a source of records about a worker.
type origin uint8

const (
	originTree origin = iota
	originTelemetry
	originScheduler
	nOrigins
)

var originNames = [nOrigins]string{"tree", "telemetry", "scheduler"}

// identity is what a worker is called and which sources named it.
type identity struct {
	name string
	// firstMention: first record naming it (any source); lastMention: last
	// (drives expiry); lastAlive: last of its own telemetry or of its tree
	// with a live process (drives "lost"); fresh: own telemetry or tree since
	// start.
	firstMention, lastMention, lastAlive int64
	fresh                                bool
	// restoredAt: when it was restored from the checkpoint (0 = not).
	restoredAt int64
	// origins: which sources named it, when and by which id attributes.
	origins          [nOrigins]originSeen
	unjoinedReported bool
}

// cpIdentity is the identity's checkpoint record. Sources: which sources
// named the worker, by name, with their id attributes by name (their bit
// order depends on the config).
type cpIdentity struct {
	Name         string              `json:"name,omitempty"`
	FirstMention int64               `json:"first"`
	LastMention  int64               `json:"mention"`
	LastAlive    int64               `json:"alive"`
	Sources      map[string]cpOrigin `json:"sources,omitempty"`
}

type cpOrigin struct {
	Last int64    `json:"last"`
	Keys []string `json:"keys,omitempty"`
}

func (x *identity) cp(idKeys []string) cpIdentity {
	c := cpIdentity{Name: x.name, FirstMention: x.firstMention, LastMention: x.lastMention, LastAlive: x.lastAlive}
	for o, seen := range x.origins {
		if seen.last == 0 {
			continue
		}
		if c.Sources == nil {
			c.Sources = map[string]cpOrigin{}
		}
		co := cpOrigin{Last: seen.last}
		for i, k := range idKeys {
			if seen.keys&(1<<i) != 0 {
				co.Keys = append(co.Keys, k)
			}
		}
		c.Sources[originNames[o]] = co
	}
	return c
}

// restore takes a checkpointed identity back, restored now.
func (x *identity) restore(c *cpIdentity, idKeys []string, now int64) {
	x.name, x.firstMention, x.lastMention, x.lastAlive = c.Name, c.FirstMention, c.LastMention, c.LastAlive
	for o, name := range originNames {
		co, ok := c.Sources[name]
		if !ok {
			continue
		}
		x.origins[o].last = co.Last
		for _, k := range co.Keys {
			if i := slices.Index(idKeys, k); i >= 0 {
				x.origins[o].keys |= 1 << i
			}
		}
	}
	x.restoredAt = now
}

// originSeen is one source's view of a worker's identity.
type originSeen struct {
	last int64 // last record (0 = never)
	keys uint8 // bit i: named by Config.idKeys()[i]
}

// seenBy records a record of a source about the worker.
func (t *tracker) seenBy(w *worker, o origin, key uint8, now int64) {
	s := &w.origins[o]
	s.last = now
	if key != noKey {
		s.keys |= 1 << key
	}
	t.originAt[o] = now
}

// unjoined is one report of a worker only one source names.
type unjoined struct {
	worker string
	origin string
	ids    []string // the ids that source used for it
	others []string // ids of workers only another source names (at most 5)
}

// sourcesOf is the number of sources that named the worker, and the last one.
func (w *worker) sourcesOf() (n int, last origin) {
	for o := range nOrigins {
		if w.origins[o].last > 0 {
			n++
			last = o
		}
	}
	return n, last
}

// checkJoin reports the workers that one source alone has named for
// identity.join_within while another source names other workers.
func (t *tracker) checkJoin(now int64) []unjoined {
	within := int64(t.cfg.Identity.JoinWithin)
	var out []unjoined
	var sorted []*worker // made once, only when a worker is reported
	for _, w := range t.workers {
		if w.unjoinedReported || w.evidence == evidenceOnce || now-w.firstMention < within {
			continue
		}
		n, o := w.sourcesOf()
		if n != 1 || !t.otherOrigin(o, now) {
			continue
		}
		w.unjoinedReported = true
		u := unjoined{worker: w.id, origin: originNames[o], ids: t.idsOf(w, o)}
		if sorted == nil {
			sorted = t.byID()
		}
		for _, x := range sorted {
			if len(u.others) >= 5 {
				break
			}
			if xn, xo := x.sourcesOf(); x != w && xn == 1 && xo != o {
				u.others = append(u.others, originNames[xo]+" "+t.idsOf(x, xo)[0])
			}
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b unjoined) int { return strings.Compare(a.worker, b.worker) })
	return out
}

// otherOrigin: some worker was named by a source other than o lately.
func (t *tracker) otherOrigin(o origin, now int64) bool {
	for x := range nOrigins {
		if x != o && t.originAt[x] > 0 && now-t.originAt[x] < int64(t.cfg.Limits.WorkerTTL) {
			return true
		}
	}
	return false
}

// idsOf are the "key=value" ids a source named the worker by.
func (t *tracker) idsOf(w *worker, o origin) []string {
	var ids []string
	for i, k := range t.idKeys {
		if w.origins[o].keys&(1<<i) != 0 {
			ids = append(ids, k+"="+w.id)
		}
	}
	if len(ids) == 0 {
		ids = append(ids, "(no id attribute)="+w.id)
	}
	return ids
}

func (t *tracker) sourcesSnapshot(w *worker) contract.Sources {
	one := func(o origin) contract.Source {
		s := w.origins[o]
		if s.last == 0 {
			return contract.Source{IDs: []string{}}
		}
		return contract.Source{Seen: true, LastSeen: ts(s.last), IDs: t.idsOf(w, o)}
	}
	return contract.Sources{Tree: one(originTree), Telemetry: one(originTelemetry), Scheduler: one(originScheduler)}
}

// message is the log line's text.
func (u unjoined) message() string {
	return fmt.Sprintf("worker %s is named only by its %s (%v); its other sources may use other ids", u.worker, u.origin, u.ids)
}
