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

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// The records as stored: compressed, at least 3 times smaller than their
// JSON for a worker with three runs; JSON records read as they are; bad
// ones refused with an error that says why.
func TestCheckpointCodec(t *testing.T) {
	js, err := os.ReadFile(filepath.Join("testdata", "checkpoint", "record.json"))
	require.NoError(t, err)
	var e recordEncoder
	enc := e.appendRecord(nil, js)
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
		cpSlotKey(1): stored[1],
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
	for _, v := range storedSlots(t, store) {
		assert.Equal(t, cpFormatS2Dict1, v[0], "rewritten compressed")
	}
	var meta tracker.Meta
	store.mu.Lock()
	require.NoError(t, json.Unmarshal(store.data[cpMetaKey], &meta))
	store.mu.Unlock()
	assert.Equal(t, tracker.CheckpointVersion, meta.Version)
	require.NoError(t, h2.p.shutdown(ctx, pl2))
}

// A group's value: records at their slots' places, empty slots, and a value
// whose framing is broken refused with an error that says where, the
// records before the break kept; restore counts such a group as
// unreadable and admits the rest.
func TestCheckpointGroupCodec(t *testing.T) {
	var e recordEncoder
	g := tracker.Group{Index: 2, Writes: []tracker.Write{
		{Slot: 2*tracker.GroupSlots + 1, Rec: tracker.Record{ID: "a"}},
		{Slot: 2*tracker.GroupSlots + 5, Rec: tracker.Record{ID: "b"}},
	}}
	v, err := e.encodeGroup(&g, json.Marshal)
	require.NoError(t, err)
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
	assert.Equal(t, map[int]string{0: "", 1: "a", 2: "", 3: "", 4: "", 5: "b"}, got, "slots 0 to the last in use")

	var before int
	err = decodeGroup(v[:len(v)-3], func(_ int, rec []byte) {
		if len(rec) > 0 {
			before++
		}
	})
	require.ErrorContains(t, err, "slot 5 of the group: its length is broken")
	assert.Equal(t, 1, before, "the record before the break")
	require.ErrorIs(t, decodeGroup(nil, func(int, []byte) {}), errGroupFormat)
	require.ErrorIs(t, decodeGroup([]byte{0x09, 0}, func(int, []byte) {}), errGroupFormat)
	tooMany := append([]byte{cpGroupFormat1}, make([]byte, tracker.GroupSlots+1)...)
	require.ErrorContains(t, decodeGroup(tooMany, func(int, []byte) {}), "more than 64 slots")
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

// What compressing costs a checkpoint write, per record, side by side with
// the JSON alone (docs/results/density.md, "The checkpoint compressed"):
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
		var e recordEncoder
		var n int
		for b.Loop() {
			out, err := json.Marshal(&rec)
			if err != nil {
				b.Fatal(err)
			}
			n = len(e.appendRecord(nil, out))
		}
		b.ReportMetric(float64(n), "stored-bytes")
	})
	b.Run("s2", func(b *testing.B) {
		var e recordEncoder
		for b.Loop() {
			e.appendRecord(nil, js)
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
		var e recordEncoder
		stored := e.appendRecord(nil, js)
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
