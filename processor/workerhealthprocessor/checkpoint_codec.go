package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// A worker's checkpoint record is its JSON, stored in its group's value
// (below), compressed (klauspost/compress, in the build already for the
// exporters) against a dictionary of the records' keys.
//
// Why: file_storage keeps the records in a bbolt file that it maps into
// memory, and every checkpoint rewrites each worker that reported, so every
// page of the tree is read through the mapping and counts in the collector's
// RSS. A worker with three runs is 1,131 bytes of JSON, two records to a 4
// KiB page: at 100,000 workers the mapped pages were 3.5 KiB a worker, more
// than the tracker's heap (docs/results/density.md, "the checkpoint
// compressed").
//
// Records stored one by one before (group format 1) are each behind a byte
// that names their format: cpFormatS2Dict1, or plain JSON (first byte '{'),
// read as it is; the records of a format-2 group are plain JSON.
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

// recordEncoder builds groups' values; its encoder and scratch buffers are
// reused, and each value gets a copy of its exact size (the batch holds
// every value until it is written). Under cpMu.
type recordEncoder struct {
	zstd           *zstd.Encoder
	scratch, group []byte
}

// A group of slots (tracker.GroupSlots of them, tracker/checkpoint.go says
// why) is stored as one value: a format byte, then each slot of the group in
// order, up to the last one in use, as the length of its stored record
// (a uvarint; 0: an empty slot) and the record.
//
// Format 2 (written since 2026-12-05) compresses the slots together with
// zstd (its fastest level) against cpDict1, each record its JSON. Why: the
// records of a group share more than a record shares with the dictionary
// (their workers' ids, run ids and times of one round differ in their last
// characters), and the file that bbolt maps is the checkpoint's part of the
// RSS: workers fed as TestDensity feeds them (fleetload.Round) take 489
// bytes each compressed one by one with S2, 255 with S2 over the group and
// 96 with zstd over the group (TestCheckpointGroupSize; BenchmarkCheckpointGroup,
// which also times them: zstd over a group takes less time than S2 took
// record by record, and about twice what S2 takes over the group;
// docs/results/density.md). zstd was not taken for
// single records (one call a record costs many times S2's); over a group
// it is one call for up to 64 records.
//
// Format 1 (each record compressed on its own, cpFormatS2Dict1, or plain
// JSON) is read as before: the next checkpoint rewrites the group.
const (
	cpGroupFormat1 byte = 0x01
	cpGroupFormat2 byte = 0x02
)

// cpZstdDict is cpDict1's id in zstd frames (a raw dictionary: its content).
const cpZstdDict = 1

// encodeGroup is a group's value (format 2), each record marshaled with
// marshal.
func (e *recordEncoder) encodeGroup(g *tracker.Group, marshal func(any) ([]byte, error)) ([]byte, error) {
	if e.zstd == nil {
		enc, err := newGroupEncoder()
		if err != nil {
			return nil, err
		}
		e.zstd = enc
	}
	e.group = e.group[:0]
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
		e.group = binary.AppendUvarint(e.group, uint64(len(js)))
		e.group = append(e.group, js...)
	}
	e.scratch = e.zstd.EncodeAll(e.group, append(e.scratch[:0], cpGroupFormat2))
	// A copy of its exact size: the batch holds every value until it is
	// written.
	return bytes.Clone(e.scratch), nil
}

// newGroupEncoder is format 2's encoder. One serves a checkpoint: EncodeAll
// starts no goroutine, and its tables are reused from group to group. A
// window of 128 KiB (a group of 64 workers is about 96 KiB of JSON in
// TestCheckpointGroupSize) and the lower-memory tables: it holds 0.9 MB,
// where the library's defaults hold 9.3 for groups stored as small
// (BenchmarkCheckpointGroup, encoder-bytes). writeCheckpoint lets it go
// when the checkpoint is written rather than keep it for the processor's
// life: a new one costs two to three times one group's encoding
// (BenchmarkCheckpointGroup, group-zstd-new: 0.29-0.39 ms against 0.12 for
// group-zstd-kept, three runs), once a
// checkpoint of 160 groups at 10,000 workers, and the heap between
// checkpoints is 1 MB less (a shard's fixed cost: 0.1 KiB a worker at
// 10,000 workers).
func newGroupEncoder() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderDictRaw(cpZstdDict, []byte(cpDict1)), zstd.WithWindowSize(1<<17), zstd.WithLowerEncoderMem(true))
}

// cpMaxGroup bounds a group's slots decompressed (format 2): what its
// records may be at most (cpMaxRecord each), so a corrupt size allocates
// no more than the records it could hold.
const cpMaxGroup = tracker.GroupSlots * (cpMaxRecord + binary.MaxVarintLen64)

// cpZstd is the decoder of format 2 (restore reads every group with it;
// DecodeAll may be called concurrently). Made at the first group read: no
// goroutine, its buffers allocated as it decodes.
var cpZstd = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(cpMaxGroup), zstd.WithDecoderDictRaw(cpZstdDict, []byte(cpDict1)))
})

// decodeGroup calls each with every slot of a group's value, by its place in
// the group, and its stored record (empty: no worker; decodeRecord reads
// it); a value whose framing is broken is an error, after the records
// before the break.
func decodeGroup(v []byte, each func(i int, rec []byte)) error {
	if len(v) == 0 {
		return errGroupFormat
	}
	switch v[0] {
	case cpGroupFormat1:
		v = v[1:]
	case cpGroupFormat2:
		dec, err := cpZstd()
		if err != nil {
			return err
		}
		if v, err = dec.DecodeAll(v[1:], nil); err != nil {
			return fmt.Errorf("the group's compression: %w", err)
		}
	default:
		return errGroupFormat
	}
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
