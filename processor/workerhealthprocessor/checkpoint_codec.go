package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// A worker's checkpoint record is stored as its JSON compressed with S2
// (klauspost/compress, in the build already for the exporters) against a
// dictionary of the records' keys, behind one byte that names the format.
//
// Why: file_storage keeps the records in a bbolt file that it maps into
// memory, and every checkpoint rewrites each worker that reported, so every
// page of the tree is read through the mapping and counts in the collector's
// RSS. A worker with three runs is 1,131 bytes of JSON, two records to a 4
// KiB page: at 100,000 workers the mapped pages were 3.5 KiB a worker, more
// than the tracker's heap. Compressed, the same record is 346 bytes
// (TestCheckpointCodec; docs/results/density.md, "the checkpoint
// compressed"). S2 rather than zstd: zstd with the same dictionary stores it
// smaller but takes many times longer (BenchmarkCheckpointRecord), and the
// write encodes every worker that changed.
//
// Records written before (plain JSON, first byte '{') are read as they are,
// so no version change: the next checkpoint rewrites them compressed.
const (
	// cpFormatS2Dict1 is JSON compressed with S2 and cpDict1.
	cpFormatS2Dict1 byte = 0x01
)

// cpDict1 is what records commonly hold: their keys in the order
// encoding/json writes them and the values most workers share. Never edit
// it: records written with it are read with it. A better dictionary is a new
// one with a new format byte, both kept for reading.
const cpDict1 = `{"id":"","ev":1,"name":"","first":,"mention":,"alive":,"sources":{"scheduler":{"last":,"keys":["cicd.worker.id"]},` +
	`"telemetry":{"last":,"keys":["service.instance.id","cicd.worker.id"]},"tree":{"last":,"keys":["cicd.worker.id"]}},` +
	`"cap":1,"claims":[0,0],"last_claim":,"runs":{"":{"wa":,"sa":,"we":,"se":,"c":,"s":,"f":26,"e":,"r":1,"k":1,"n":1},` +
	`"":{"wa":,"sa":,"c":,"s":,"f":21}},"sched_known":true,"sched":"scheduler","rss":,"cgmax":-1,"mem":{},` +
	`"roles":[{"role":"main","rss":,"mem":{}},{"role":"child","rss":,"mem":{}}],"persist":{"persist_since":,"persist_value":,` +
	`"persist_n":,"persist_at":},"at_start":{"at_start_since":,"at_start_value":},"kills":{"kill_since":,"kill_log":[{"at":,"pid":,"role":"child","reason":"oom"}]},` +
	`"transitions":{"healthy":1,"degraded":1,"unhealthy":1,"stalled":1,"lost":1},"incarnation":{"inc":{"pid":,"start":,"sig":""},"exit":{"how":"","code":,"at":}}}`

// cpDict is nil only if cpDict1 were shorter than S2's minimum
// (TestCheckpointCodec).
var cpDict = s2.MakeDict([]byte(cpDict1), []byte(`{"id":"`))

// recordEncoder compresses records' JSON and builds groups' values; its
// scratch buffers are reused, and each value gets a copy of its exact size
// (the batch holds every value until it is written). Under cpMu.
type recordEncoder struct{ scratch, rec, group []byte }

// appendRecord appends the stored form of a record's JSON to dst.
func (e *recordEncoder) appendRecord(dst, js []byte) []byte {
	if n := s2.MaxEncodedLen(len(js)); cap(e.scratch) < n {
		e.scratch = make([]byte, n)
	}
	enc := cpDict.Encode(e.scratch[:cap(e.scratch)], js)
	dst = append(dst, cpFormatS2Dict1)
	return append(dst, enc...)
}

// A group of slots (tracker.GroupSlots of them, tracker/checkpoint.go says
// why) is stored as one value: a format byte, then each slot of the group in
// order, up to the last one in use, as the length of its stored record
// (a uvarint; 0: an empty slot) and the record.
const cpGroupFormat1 byte = 0x01

// encodeGroup is a group's value, each record marshaled (with marshal) and
// compressed at its slot's place.
func (e *recordEncoder) encodeGroup(g *tracker.Group, marshal func(any) ([]byte, error)) ([]byte, error) {
	e.group = append(e.group[:0], cpGroupFormat1)
	next := g.Index * tracker.GroupSlots
	for i := range g.Writes {
		w := &g.Writes[i]
		for ; next < w.Slot; next++ {
			e.group = append(e.group, 0) // an empty slot
		}
		next++
		js, err := marshal(&w.Rec)
		if err != nil {
			return nil, err
		}
		e.rec = e.appendRecord(e.rec[:0], js)
		e.group = binary.AppendUvarint(e.group, uint64(len(e.rec)))
		e.group = append(e.group, e.rec...)
	}
	return bytes.Clone(e.group), nil
}

// decodeGroup calls each with every slot of a group's value, by its place in
// the group, and its stored record (empty: no worker); a value whose framing
// is broken is an error, after the records before the break.
func decodeGroup(v []byte, each func(i int, rec []byte)) error {
	if len(v) == 0 || v[0] != cpGroupFormat1 {
		return errGroupFormat
	}
	v = v[1:]
	for i := 0; len(v) > 0; i++ {
		if i == tracker.GroupSlots {
			return fmt.Errorf("a group of more than %d slots", tracker.GroupSlots)
		}
		n, k := binary.Uvarint(v)
		if k <= 0 || n > uint64(len(v)-k) {
			return fmt.Errorf("slot %d of the group: its length is broken", i)
		}
		each(i, v[k:k+int(n)])
		v = v[k+int(n):]
	}
	return nil
}

var errGroupFormat = errors.New("unknown group format")

var errRecordFormat = errors.New("unknown record format")

// decodeRecord returns a stored record's JSON: compressed records
// decompressed, JSON records as they are; either refused when its JSON is
// over cpMaxRecord (a compressed one before it is allocated).
func decodeRecord(v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, errRecordFormat
	}
	switch v[0] {
	case '{':
		if len(v) > cpMaxRecord {
			return nil, fmt.Errorf("record of %d bytes, over %d", len(v), cpMaxRecord)
		}
		return v, nil
	case cpFormatS2Dict1:
		n, err := s2.DecodedLen(v[1:])
		if err != nil {
			return nil, err
		}
		if n > cpMaxRecord {
			return nil, fmt.Errorf("record of %d bytes decompressed, over %d", n, cpMaxRecord)
		}
		return cpDict.Decode(nil, v[1:])
	default:
		return nil, fmt.Errorf("%w %#x", errRecordFormat, v[0])
	}
}
