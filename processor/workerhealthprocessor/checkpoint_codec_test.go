package workerhealthprocessor

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	enc := e.encode(js)
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

// A checkpoint written as plain JSON (by a build before the records were
// compressed) restores the same workers, and the next checkpoint rewrites
// each record compressed.
func TestRestoreReadsPlainJSONRecords(t *testing.T) {
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

	slots := store.keys(cpPrefix + "w/")
	require.Len(t, slots, 2)
	store.mu.Lock()
	for _, k := range slots {
		require.Equal(t, cpFormatS2Dict1, store.data[k][0], "written compressed")
		js, err := decodeRecord(store.data[k])
		require.NoError(t, err)
		store.data[k] = js
	}
	store.mu.Unlock()

	h2 := newHarness(t, cfg)
	h2.clock.Advance(10 * time.Second)
	pl2 := &pipeline{}
	require.NoError(t, h2.p.start(ctx, hst, pl2))
	h2.advance(time.Second)
	h2.eval()
	assert.Equal(t, unknown, h2.state("w1"), "restored, no telemetry since")
	assert.Equal(t, unhealthy, h2.state("w2"), "the memory latch read from the JSON record")
	hb(h2)
	h2.eval()
	assert.Equal(t, degraded, h2.state("w1"), "the scheduler's run read from the JSON record")
	assert.Contains(t, h2.codes("w1"), state.CodeMissing)
	h2.checkpoint()
	store.mu.Lock()
	for _, k := range slots {
		assert.Equal(t, cpFormatS2Dict1, store.data[k][0], "%s rewritten compressed", k)
	}
	store.mu.Unlock()
	require.NoError(t, h2.p.shutdown(ctx, pl2))
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
			n = len(e.encode(out))
		}
		b.ReportMetric(float64(n), "stored-bytes")
	})
	b.Run("s2", func(b *testing.B) {
		var e recordEncoder
		for b.Loop() {
			e.encode(js)
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
		stored := e.encode(js)
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
