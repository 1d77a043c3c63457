package workerhealthprocessor

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/fleetload"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// The records as stored one by one (group format 1, written before
// 2026-12-05): compressed, at least 3 times smaller than their JSON for a
// worker with three runs; JSON records read as they are; bad ones refused
// with an error that says why.
func TestCheckpointCodec(t *testing.T) {
	js, err := os.ReadFile(filepath.Join("testdata", "checkpoint", "record.json"))
	require.NoError(t, err)
	enc := appendRecordV1(js)
	require.Equal(t, cpFormatS2Dict1, enc[0])
	t.Logf("a record of %d bytes of JSON stored in %d (%.2fx)", len(js), len(enc), float64(len(js))/float64(len(enc)))
	assert.Less(t, 3*len(enc), len(js), "compressed at least 3x")
	got, err := decodeRecord(enc)
	require.NoError(t, err)
	assert.Equal(t, string(js), string(got))

	// The dictionary never changes: records written with it are read with
	// it. A new dictionary comes with a new format byte, both kept.
	assert.Equal(t, "ea7dd23475386039b0ef8aa72edf897103b3e5126351d32a74976cb5f52a4e98",
		fmt.Sprintf("%x", sha256.Sum256([]byte(cpDict1))), "cpDict1 changed: the records written with it would no longer read")
	// And a record written by an earlier build (this file, written once)
	// still reads back.
	old, err := os.ReadFile(filepath.Join("testdata", "checkpoint", "record.s2dict1"))
	require.NoError(t, err)
	got, err = decodeRecord(old)
	require.NoError(t, err)
	assert.Equal(t, string(js), string(got))

	got, err = decodeRecord(js)
	require.NoError(t, err, "a record written as JSON is read as it is")
	assert.Equal(t, string(js), string(got))

	_, err = decodeRecord(nil)
	require.ErrorIs(t, err, errRecordFormat)
	_, err = decodeRecord([]byte{0x07, 1, 2})
	require.ErrorContains(t, err, "unknown record format 0x7")
	_, err = decodeRecord(enc[:len(enc)/2])
	require.Error(t, err, "a truncated record")
	huge := binary.AppendUvarint([]byte{cpFormatS2Dict1}, cpMaxRecord+1)
	_, err = decodeRecord(append(huge, 0, 0, 0, 0))
	require.ErrorContains(t, err, "over 4194304", "refused before it is allocated")
	_, err = decodeRecord(append([]byte("{"), make([]byte, cpMaxRecord)...))
	require.ErrorContains(t, err, "over 4194304", "a JSON record as large")
}

// A checkpoint of version 2 (a value per slot, written by builds before the
// groups: its records plain JSON before 422f1ec, compressed since) restores
// the same workers, and the next checkpoint rewrites them as groups and
// deletes the slots' values.
func TestRestoreReadsVersion2Checkpoints(t *testing.T) {
	store := &memStorage{}
	storageID := component.MustNewID("file_storage")
	cfg := testCfg()
	cfg.StorageID = &storageID
	cfg.EmitInterval = time.Hour // evaluated by hand
	cfg.Lost.After = time.Minute
	ctx := context.Background()
	h1 := newHarness(t, cfg)
	hst := host{ext: map[component.ID]component.Component{storageID: store}}
	pl1 := &pipeline{}
	require.NoError(t, h1.p.start(ctx, hst, pl1))
	twoCheckpointedWorkers(t, h1)
	require.NoError(t, h1.p.shutdown(ctx, pl1))

	// The same checkpoint as version 2 wrote it: slot 0 as JSON, slot 1
	// compressed.
	stored := storedSlots(t, store)
	require.Len(t, stored, 2)
	js, err := decodeRecord(stored[0])
	require.NoError(t, err)
	store.mu.Lock()
	store.data = map[string][]byte{
		cpMetaKey:    []byte(`{"version":2,"scheduler_seen":` + strconv.FormatInt(h1.clock.Now().UnixNano(), 10) + `,"slots":2}`),
		cpSlotKey(0): js,
		cpSlotKey(1): appendRecordV1(stored[1]),
	}
	store.mu.Unlock()

	h2 := newHarness(t, cfg)
	h2.clock.Advance(10 * time.Second)
	pl2 := &pipeline{}
	require.NoError(t, h2.p.start(ctx, hst, pl2))
	h2.advance(time.Second)
	h2.eval()
	assert.Equal(t, unknown, h2.state("w1"), "restored, no telemetry since")
	assert.Equal(t, unhealthy, h2.state("w2"), "the memory latch read from the version 2 record")
	hb(h2)
	h2.eval()
	assert.Equal(t, degraded, h2.state("w1"), "the scheduler's run read from the version 2 JSON record")
	assert.Contains(t, h2.codes("w1"), state.CodeMissing)
	h2.checkpoint()
	assert.Empty(t, store.keys(cpPrefix+"w/"), "the version 2 values deleted")
	assert.ElementsMatch(t, []string{"w1", "w2"}, slices.Collect(maps.Values(storedIDs(t, store))), "both rewritten as a group")
	for _, k := range store.keys(cpPrefix + "g/") {
		store.mu.Lock()
		assert.Equal(t, cpGroupFormat2, store.data[k][0], "rewritten as a group compressed whole")
		store.mu.Unlock()
	}
	var meta tracker.Meta
	store.mu.Lock()
	require.NoError(t, json.Unmarshal(store.data[cpMetaKey], &meta))
	store.mu.Unlock()
	assert.Equal(t, tracker.CheckpointVersion, meta.Version)
	require.NoError(t, h2.p.shutdown(ctx, pl2))
}

// appendRecordV1 is a record as group format 1 stored it: its JSON
// compressed on its own (cpFormatS2Dict1), what builds before 2026-12-05
// wrote and restore still reads.
func appendRecordV1(js []byte) []byte {
	return append([]byte{cpFormatS2Dict1}, cpDict.Encode(nil, js)...)
}

// groupIDs is the worker id of every slot of a group's value ("" empty).
func groupIDs(t *testing.T, v []byte) map[int]string {
	t.Helper()
	got := map[int]string{}
	require.NoError(t, decodeGroup(v, func(i int, rec []byte) {
		if len(rec) == 0 {
			got[i] = ""
			return
		}
		js, err := decodeRecord(rec)
		require.NoError(t, err)
		var r tracker.Record
		require.NoError(t, json.Unmarshal(js, &r))
		got[i] = r.ID
	}))
	return got
}

// A group's value: records at their slots' places, empty slots, and a value
// whose framing is broken refused with an error that says where, the
// records before the break kept; restore counts such a group as
// unreadable and admits the rest. Written as format 2 (compressed
// together); format 1 (each record on its own) is read as before.
func TestCheckpointGroupCodec(t *testing.T) {
	var e recordEncoder
	g := tracker.Group{Index: 2, Writes: []tracker.Write{
		{Slot: 2*tracker.GroupSlots + 1, Rec: tracker.Record{ID: "a"}},
		{Slot: 2*tracker.GroupSlots + 5, Rec: tracker.Record{ID: "b"}},
	}}
	v, err := e.encodeGroup(&g, json.Marshal)
	require.NoError(t, err)
	require.Equal(t, cpGroupFormat2, v[0])
	want := map[int]string{0: "", 1: "a", 2: "", 3: "", 4: "", 5: "b"}
	assert.Equal(t, want, groupIDs(t, v), "slots 0 to the last in use")

	// The same group as format 1 wrote it.
	v1 := []byte{cpGroupFormat1}
	for i := range 6 {
		var rec []byte
		if id := want[i]; id != "" {
			js, err := json.Marshal(&tracker.Record{ID: id})
			require.NoError(t, err)
			rec = appendRecordV1(js)
		}
		v1 = binary.AppendUvarint(v1, uint64(len(rec)))
		v1 = append(v1, rec...)
	}
	assert.Equal(t, want, groupIDs(t, v1), "format 1")

	var before int
	err = decodeGroup(v1[:len(v1)-3], func(_ int, rec []byte) {
		if len(rec) > 0 {
			before++
		}
	})
	require.ErrorContains(t, err, "slot 5 of the group: its length is broken")
	assert.Equal(t, 1, before, "the record before the break")
	require.ErrorContains(t, decodeGroup(v[:len(v)-3], func(int, []byte) {}), "the group's compression", "format 2 cut short")
	require.ErrorContains(t, decodeGroup([]byte{cpGroupFormat2, 1, 2, 3, 4, 5}, func(int, []byte) {}), "the group's compression", "format 2 that is not zstd")
	require.ErrorIs(t, decodeGroup(nil, func(int, []byte) {}), errGroupFormat)
	require.ErrorIs(t, decodeGroup([]byte{0x09, 0}, func(int, []byte) {}), errGroupFormat)
	tooMany := append([]byte{cpGroupFormat1}, make([]byte, tracker.GroupSlots+1)...)
	require.ErrorContains(t, decodeGroup(tooMany, func(int, []byte) {}), "more than 64 slots")
}

// densityGroups is the checkpoint's groups of 640 workers fed as
// TestDensity feeds them (a tree sample, a heartbeat and a run claimed and
// started each, the previous run ended), four rounds 10 s apart, with run
// ids shaped as UUIDs: the records decoded, each group as the slots
// format 2 compresses (uvarint lengths and JSON), and the bytes the
// checkpoint stored for them.
func densityGroups(tb testing.TB) (groups [][]byte, stored int) {
	cfg := createDefaultConfig().(*Config)
	store := &memStorage{}
	h := started(tb, cfg, store)
	const n = 640
	for round := range 4 {
		now := pcommon.NewTimestampFromTime(h.clock.Now())
		md := pmetric.NewMetrics()
		ld := plog.NewLogs()
		sched := fleetload.Scheduler(ld)
		for i := range n {
			runID := func(r int) string { return fmt.Sprintf("%08x-1b2c-4d3e-8f90-%012x", i*31+r, (i*7+r)*0x9E3779B1) }
			prev := ""
			if round > 0 {
				prev = runID(round - 1)
			}
			// The fleet's records spread over the round.
			fleetload.Round(md, ld, sched, fmt.Sprintf("density-worker-%06d", i), i, prev, runID(round), now, now+pcommon.Timestamp(i*7919))
		}
		h.logs(ld)
		h.metrics(md)
		h.advance(10 * time.Second)
		h.p.tick(context.Background())
	}
	h.checkpoint()
	for _, k := range store.keys(cpPrefix + "g/") {
		store.mu.Lock()
		v := store.data[k]
		store.mu.Unlock()
		require.Equal(tb, cpGroupFormat2, v[0])
		stored += len(v)
		var slots []byte
		require.NoError(tb, decodeGroup(v, func(_ int, rec []byte) {
			slots = binary.AppendUvarint(slots, uint64(len(rec)))
			slots = append(slots, rec...)
		}))
		groups = append(groups, slots)
	}
	require.Len(tb, groups, n/tracker.GroupSlots)
	return groups, stored
}

// Compressed together (format 2), a group of workers fed as TestDensity
// feeds them is at least 3 times smaller than its records compressed one by
// one (format 1): 96 against 489 bytes a worker on 2ea4e8b (the roots'
// incarnations included), 87 against 412 before them.
func TestCheckpointGroupSize(t *testing.T) {
	groups, v2 := densityGroups(t)
	v1, workers := 0, 0
	for _, slots := range groups {
		v1++
		for len(slots) > 0 {
			n, k := binary.Uvarint(slots)
			require.Positive(t, k)
			js := slots[k : k+int(n)]
			slots = slots[k+int(n):]
			if n > 0 {
				workers++
			}
			rec := appendRecordV1(js)
			v1 += len(binary.AppendUvarint(nil, uint64(len(rec)))) + len(rec)
		}
	}
	t.Logf("%d workers: format 1 %d bytes (%.0f a worker), format 2 %d (%.0f), %.2fx", workers, v1, float64(v1)/float64(workers),
		v2, float64(v2)/float64(workers), float64(v1)/float64(v2))
	assert.Greater(t, float64(v1)/float64(v2), 3.0)
}

// What a group costs to store, side by side: its records compressed one by
// one with S2 (format 1), together with S2, together with zstd (format 2,
// written); stored-bytes is a worker's share:
//
//	go test -run '^$' -bench BenchmarkCheckpointGroup -count 3 ./processor/workerhealthprocessor/
func BenchmarkCheckpointGroup(b *testing.B) {
	groups, _ := densityGroups(b)
	perWorker := func(b *testing.B, stored int) {
		b.ReportMetric(float64(stored)/float64(len(groups)*tracker.GroupSlots), "stored-bytes")
	}
	b.Run("records", func(b *testing.B) {
		var stored int
		for b.Loop() {
			stored = 0
			for _, slots := range groups {
				for len(slots) > 0 {
					n, k := binary.Uvarint(slots)
					stored += len(appendRecordV1(slots[k:k+int(n)])) + k
					slots = slots[k+int(n):]
				}
			}
		}
		perWorker(b, stored)
	})
	b.Run("group-s2", func(b *testing.B) {
		var stored int
		for b.Loop() {
			stored = 0
			for _, slots := range groups {
				stored += len(cpDict.Encode(nil, slots))
			}
		}
		perWorker(b, stored)
	})
	// zstd as written (newGroupEncoder), and with the library's default
	// window and tables: encoder-bytes is the heap an encoder holds once it
	// has encoded a group (a fixed cost of the shard's).
	for _, z := range []struct {
		name string
		make func() (*zstd.Encoder, error)
	}{
		{"group-zstd", newGroupEncoder},
		{"group-zstd-defaults", func() (*zstd.Encoder, error) {
			return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
				zstd.WithEncoderDictRaw(cpZstdDict, []byte(cpDict1)))
		}},
	} {
		b.Run(z.name, func(b *testing.B) {
			before := heapAfterGC()
			enc, err := z.make()
			require.NoError(b, err)
			defer enc.Close()
			out := enc.EncodeAll(groups[0], nil)
			held := heapAfterGC() - before - uint64(cap(out))
			var stored int
			for b.Loop() {
				stored = 0
				for _, slots := range groups {
					out = enc.EncodeAll(slots, out[:0])
					stored += len(out)
				}
			}
			perWorker(b, stored)
			b.ReportMetric(float64(held), "encoder-bytes")
		})
	}
	// A new encoder and one group (what a checkpoint pays for not keeping
	// one between checkpoints), beside one group with an encoder kept.
	b.Run("group-zstd-new", func(b *testing.B) {
		for b.Loop() {
			enc, err := newGroupEncoder()
			require.NoError(b, err)
			_ = enc.EncodeAll(groups[0], nil)
		}
	})
	b.Run("group-zstd-kept", func(b *testing.B) {
		enc, err := newGroupEncoder()
		require.NoError(b, err)
		var out []byte
		for b.Loop() {
			out = enc.EncodeAll(groups[0], out[:0])
		}
	})
}

// FuzzCheckpointGroup: no stored value crashes the decoding of a group or
// of its records.
func FuzzCheckpointGroup(f *testing.F) {
	var e recordEncoder
	v, err := e.encodeGroup(&tracker.Group{Writes: []tracker.Write{{Slot: 1, Rec: tracker.Record{ID: "a"}}}}, json.Marshal)
	require.NoError(f, err)
	f.Add(v)
	f.Add([]byte{cpGroupFormat1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(_ *testing.T, v []byte) {
		_ = decodeGroup(v, func(_ int, rec []byte) {
			if js, err := decodeRecord(rec); err == nil {
				var r tracker.Record
				_ = json.Unmarshal(js, &r)
			}
		})
	})
}

// What compressing a record on its own cost, side by side with the JSON
// alone: group format 1, written before 2026-12-05 (restore still reads
// it: "restore"), and the per-record zstd it was chosen over
// (docs/results/density.md, "The checkpoint compressed"). The groups are
// compressed whole since: BenchmarkCheckpointGroup.
//
//	go test -run XXX -bench BenchmarkCheckpointRecord -count 3 ./processor/workerhealthprocessor/
func BenchmarkCheckpointRecord(b *testing.B) {
	js, err := os.ReadFile(filepath.Join("testdata", "checkpoint", "record.json"))
	require.NoError(b, err)
	var rec tracker.Record
	require.NoError(b, json.Unmarshal(js, &rec))
	b.Run("json", func(b *testing.B) {
		var n int
		for b.Loop() {
			out, err := json.Marshal(&rec)
			if err != nil {
				b.Fatal(err)
			}
			n = len(out)
		}
		b.ReportMetric(float64(n), "stored-bytes")
	})
	b.Run("json+s2", func(b *testing.B) {
		var n int
		for b.Loop() {
			out, err := json.Marshal(&rec)
			if err != nil {
				b.Fatal(err)
			}
			n = len(appendRecordV1(out))
		}
		b.ReportMetric(float64(n), "stored-bytes")
	})
	b.Run("s2", func(b *testing.B) {
		for b.Loop() {
			appendRecordV1(js)
		}
	})
	// The alternative not taken: zstd against the same dictionary.
	b.Run("zstd", func(b *testing.B) {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderDictRaw(1, []byte(cpDict1)), zstd.WithEncoderConcurrency(1))
		require.NoError(b, err)
		defer enc.Close()
		var out []byte
		for b.Loop() {
			out = enc.EncodeAll(js, out[:0])
		}
		b.ReportMetric(float64(len(out)), "stored-bytes")
	})
	b.Run("restore", func(b *testing.B) {
		stored := appendRecordV1(js)
		for b.Loop() {
			out, err := decodeRecord(stored)
			if err != nil {
				b.Fatal(err)
			}
			var r tracker.Record
			if err := json.Unmarshal(out, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
