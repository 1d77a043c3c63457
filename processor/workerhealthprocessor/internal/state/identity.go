package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"slices"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// One identity (docs/health-rules.md, "Identity"). Three sources name a
// worker: its process tree (the worker_process receiver, always by
// cicd.worker.id), its own telemetry and the scheduler (by the mapping's id
// attributes, cicd.worker.id always tried last, so the tree joins whatever
// the mapping says). Each worker remembers which sources named it, when, and
// by which attributes; the processor reports a worker only one source names
// long after it was first seen (identity.go there).

// Origin is a source of records about a worker.
type Origin uint8

const (
	OriginTree Origin = iota
	OriginTelemetry
	OriginScheduler
	NOrigins
)

// OriginNames are the sources' names, in Origin order.
var OriginNames = [NOrigins]string{"tree", "telemetry", "scheduler"}

// Identity is what a worker is called and which sources named it.
type Identity struct {
	Name string
	// FirstMention: first record naming it (any source); LastMention: last
	// (drives expiry); LastAlive: last of its own telemetry or of its tree
	// with a live process (drives "lost"); Fresh: own telemetry or tree since
	// start.
	FirstMention, LastMention, LastAlive int64
	// RestoredAt: when it was restored from the checkpoint (0 = not).
	RestoredAt int64
	// which sources named it: lastBy, when each last did (0 = never);
	// keysBy, by which id attributes (bit i: the i-th). Two arrays rather
	// than one of structs, and the bools after them: this is kept for
	// every worker, and padding was 24 of its bytes (TestWorkerSize).
	lastBy           [NOrigins]int64
	keysBy           [NOrigins]uint8
	Fresh            bool
	unjoinedReported bool
}

// NewIdentity is the identity of a worker first named now.
func NewIdentity(now int64) Identity { return Identity{FirstMention: now, LastMention: now} }

// Seen records a record of a source about the worker, naming it by the
// key-th id attribute (mapping.NoKey: none).
func (x *Identity) Seen(o Origin, key uint8, now int64) {
	x.lastBy[o] = now
	if key != mapping.NoKey {
		x.keysBy[o] |= 1 << key
	}
}

// NamedBy: the source has named the worker.
func (x *Identity) NamedBy(o Origin) bool { return x.lastBy[o] > 0 }

// Sources is the number of sources that named the worker, and the last one.
func (x *Identity) Sources() (n int, last Origin) {
	for o := range NOrigins {
		if x.lastBy[o] > 0 {
			n++
			last = o
		}
	}
	return n, last
}

// Unjoined: the worker was reported as named by one source only.
func (x *Identity) Unjoined() bool { return x.unjoinedReported }

// ReportUnjoined marks it reported (once per worker).
func (x *Identity) ReportUnjoined() { x.unjoinedReported = true }

// IDs are the "key=value" ids a source named the worker (id) by: the
// prefixes of the attributes it used (p), each followed by the id.
func (x *Identity) IDs(o Origin, id string, p *IDPrefixes) contract.SourceIDs {
	return contract.PrefixedIDs(&p.sets[x.keysBy[o]], id)
}

// Snapshot is the health API's view of the sources that named the worker:
// each source's ids are the prefixes of the attributes it named the worker
// by (shared by every worker named alike) and the worker's id.
func (x *Identity) Snapshot(id string, p *IDPrefixes) contract.Sources {
	one := func(o Origin) contract.Source {
		last := x.lastBy[o]
		if last == 0 {
			return contract.Source{}
		}
		return contract.Source{Seen: true, LastSeen: contract.Time(last), IDs: x.IDs(o, id, p)}
	}
	return contract.NewSources(one(OriginTree), one(OriginTelemetry), one(OriginScheduler))
}

// IDPrefixes are the "key=" prefixes of the worker id attributes (at most
// eight: a source's set of them is a byte), one list for each set, made
// when the tracker is: read-only after, as the snapshots that share them.
type IDPrefixes struct{ sets [256][]string }

// NewIDPrefixes are the prefixes of idKeys, in their order; a set of none
// (a source that named the worker by none of them) is "(no id
// attribute)=".
func NewIDPrefixes(idKeys []string) *IDPrefixes {
	p := &IDPrefixes{}
	for set := range 1 << min(len(idKeys), 8) {
		for i, k := range idKeys[:min(len(idKeys), 8)] {
			if set&(1<<i) != 0 {
				p.sets[set] = append(p.sets[set], k+"=")
			}
		}
		if len(p.sets[set]) == 0 {
			p.sets[set] = []string{"(no id attribute)="}
		}
	}
	return p
}

// IdentityRecord is the identity's checkpoint record. Sources: which sources
// named the worker, by name, with their id attributes by name (their bit
// order depends on the config).
type IdentityRecord struct {
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

// Checkpoint is the identity's checkpoint record; idKeys are the id
// attributes in the processor's order.
func (x *Identity) Checkpoint(idKeys []string) IdentityRecord {
	c := IdentityRecord{Name: x.Name, FirstMention: x.FirstMention, LastMention: x.LastMention, LastAlive: x.LastAlive}
	for o, last := range x.lastBy {
		if last == 0 {
			continue
		}
		if c.Sources == nil {
			c.Sources = map[string]cpOrigin{}
		}
		co := cpOrigin{Last: last}
		for i, k := range idKeys {
			if x.keysBy[o]&(1<<i) != 0 {
				co.Keys = append(co.Keys, k)
			}
		}
		c.Sources[OriginNames[o]] = co
	}
	return c
}

// Restore takes a checkpointed identity back, restored now.
func (x *Identity) Restore(c *IdentityRecord, idKeys []string, now int64) {
	x.Name, x.FirstMention, x.LastMention, x.LastAlive = c.Name, c.FirstMention, c.LastMention, c.LastAlive
	for o, name := range OriginNames {
		co, ok := c.Sources[name]
		if !ok {
			continue
		}
		x.lastBy[o] = co.Last
		for _, k := range co.Keys {
			if i := slices.Index(idKeys, k); i >= 0 {
				x.keysBy[o] |= 1 << i
			}
		}
	}
	x.RestoredAt = now
}
