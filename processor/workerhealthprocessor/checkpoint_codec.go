package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
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

// recordEncoder compresses records' JSON; its scratch buffer is reused, and
// each record gets a copy of its exact size (the batch holds every record
// until it is written). Under cpMu.
type recordEncoder struct{ scratch []byte }

func (e *recordEncoder) encode(js []byte) []byte {
	if n := s2.MaxEncodedLen(len(js)); cap(e.scratch) < n {
		e.scratch = make([]byte, n)
	}
	enc := cpDict.Encode(e.scratch[:cap(e.scratch)], js)
	out := make([]byte, 1+len(enc))
	out[0] = cpFormatS2Dict1
	copy(out[1:], enc)
	return out
}

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
