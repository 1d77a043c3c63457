// Package ring is the consistent hash of contrib's load_balancing exporter:
// which shard owns a worker id. The extension's cluster uses it to answer
// for any id at one address; the scale figures' load generator to send each
// worker's records where an agent would.
package ring // import "github.com/workerwatch/workerwatch/internal/ring"

import (
	"encoding/binary"
	"hash/crc32"
	"sort"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The consistent hash of contrib's load_balancing exporter v0.161.0
// (consistent_hashing.go, attribute_routing.go), reproduced here because the
// exporter's ring is unexported. A worker's records reach the shard this
// ring names only if both compute the same thing, so every constant and step
// is the exporter's; TestRingMatchesLoadBalancingExporter routes ids through
// the real exporter and fails if a new release hashes differently.
const (
	ringPositions   uint32 = 131071 // the exporter's maxPositions
	ringWeight             = 200    // points per endpoint (defaultWeight)
	ringProbeLimit         = 10     // linearProbeLimit
	routingKeyValue        = contract.AttrWorkerID + "="
)

type ringItem struct {
	pos      uint32
	endpoint string
}

// Ring maps a worker id to the member endpoint that owns it. Immutable.
type Ring struct {
	items []ringItem
}

// New builds the ring of the given endpoints, exactly as the exporter
// does from its resolver's list (the same strings: "10.0.0.5:4317", or a
// static hostname as written in the exporter's config).
func New(endpoints []string) *Ring {
	type candidate struct {
		pos, hash uint32
		endpoint  string
	}
	cands := make([]candidate, 0, len(endpoints)*ringWeight)
	buf := make([]byte, 4)
	for _, ep := range endpoints {
		for i := range ringWeight {
			h := crc32.NewIEEE()
			binary.LittleEndian.PutUint32(buf, uint32(i))
			_, _ = h.Write([]byte(ep))
			_, _ = h.Write(buf)
			sum := h.Sum32()
			cands = append(cands, candidate{pos: sum % ringPositions, hash: sum, endpoint: ep})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].pos != cands[j].pos {
			return cands[i].pos < cands[j].pos
		}
		if cands[i].hash != cands[j].hash {
			return cands[i].hash < cands[j].hash
		}
		return cands[i].endpoint < cands[j].endpoint
	})
	used := make(map[uint32]bool, len(cands))
	items := make([]ringItem, 0, len(cands))
	for _, c := range cands {
		pos, probed := c.pos, 0
		for used[pos] && probed < ringProbeLimit {
			pos = (pos + 1) % ringPositions
			probed++
		}
		if probed >= ringProbeLimit {
			continue // the exporter skips a point it cannot place
		}
		used[pos] = true
		items = append(items, ringItem{pos: pos, endpoint: c.endpoint})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].pos < items[j].pos })
	return &Ring{items: items}
}

// routingKey is what the exporter hashes for a record whose only routing
// attribute is cicd.worker.id (routing_key: attributes, routing_attributes:
// [cicd.worker.id]): "cicd.worker.id=<value>|". A record without the
// attribute hashes "cicd.worker.id=|", which is routingKey("").
func routingKey(workerID string) []byte {
	b := make([]byte, 0, len(routingKeyValue)+len(workerID)+1)
	b = append(b, routingKeyValue...)
	b = append(b, workerID...)
	return append(b, '|')
}

// Owner is the endpoint that owns the worker; "" for an empty ring.
func (r *Ring) Owner(workerID string) string {
	if r == nil || len(r.items) == 0 {
		return ""
	}
	pos := crc32.ChecksumIEEE(routingKey(workerID)) % ringPositions
	// The first point at or after pos, wrapping around: what the exporter's
	// bsearch returns.
	i := sort.Search(len(r.items), func(i int) bool { return r.items[i].pos >= pos })
	if i == len(r.items) {
		i = 0
	}
	return r.items[i].endpoint
}
