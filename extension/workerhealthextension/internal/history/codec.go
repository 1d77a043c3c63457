package history

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// The storage encoding of a worker's rings (the keys are in storage.go):
// little-endian, each value starting with its format version.

// slotBack is the ring slot of the i-th most recent sample.
func (h *workerHistory) slotBack(i, size int) int {
	if h.n < size {
		return h.n - 1 - i
	}
	return (h.next - 1 - i + 2*size) % size
}

func (h *workerHistory) encodeGroup(g int) []byte {
	var buf [chunkSamples]Sample
	k := decodeChunk(h.chunks[g], &buf) // a chunk is a storage group
	b := make([]byte, 0, 2+k*sampleBytes)
	b = append(b, historyStorageVersion, byte(k))
	for _, s := range buf[:k] {
		b = appendSample(b, s)
	}
	return b
}

func appendSample(b []byte, s Sample) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(s.At))
	b = le.AppendUint32(b, s.RSSKiB)
	b = le.AppendUint32(b, s.SoftKiB)
	for i := range Roles {
		b = le.AppendUint32(b, s.RoleRSS[i])
	}
	for i := range Roles {
		b = le.AppendUint32(b, s.RoleSoft[i])
	}
	b = le.AppendUint32(b, math.Float32bits(s.CPUMain))
	b = le.AppendUint32(b, math.Float32bits(s.CPULimit))
	b = le.AppendUint16(b, s.RunsWorker)
	b = le.AppendUint16(b, s.RunsScheduler)
	b = le.AppendUint16(b, s.Capacity)
	return append(b, s.State, s.RoleMask)
}

func readSample(b []byte) Sample {
	le := binary.LittleEndian
	s := Sample{At: int64(le.Uint64(b)), RSSKiB: le.Uint32(b[8:]), SoftKiB: le.Uint32(b[12:])}
	for i := range Roles {
		s.RoleRSS[i] = le.Uint32(b[16+4*i:])
		s.RoleSoft[i] = le.Uint32(b[32+4*i:])
	}
	s.CPUMain = math.Float32frombits(le.Uint32(b[48:]))
	s.CPULimit = math.Float32frombits(le.Uint32(b[52:]))
	s.RunsWorker, s.RunsScheduler, s.Capacity = le.Uint16(b[56:]), le.Uint16(b[58:]), le.Uint16(b[60:])
	s.State, s.RoleMask = b[62], b[63]
	return s
}

func (h *workerHistory) encodeHeader() []byte {
	b := []byte{historyStorageVersion}
	b = binary.LittleEndian.AppendUint16(b, uint16(h.n))
	b = binary.LittleEndian.AppendUint16(b, uint16(h.next))
	b = append(b, h.state)
	for _, r := range h.roles {
		b = appendString(b, r)
	}
	return b
}

func (h *workerHistory) encodeTransitions() []byte {
	b := []byte{historyStorageVersion, byte(len(h.trans)), byte(h.tnext)}
	for _, t := range h.trans {
		b = binary.LittleEndian.AppendUint64(b, uint64(t.At))
		b = append(b, t.From, t.To, t.NReasons)
		for _, r := range t.Reasons[:t.NReasons] {
			b = appendString(b, r.Code)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Value))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Threshold))
		}
	}
	return b
}

func encodeIDs(ids map[string]int) []byte {
	b := binary.AppendUvarint([]byte{historyStorageVersion}, uint64(len(ids)))
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		b = appendString(b, id)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// reader decodes the values above; any error sticks and the rest reads as
// zero, so a decoder checks err once at the end.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("value too short")

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || len(r.b) < n {
		r.err = cmp.Or(r.err, errShort)
		return make([]byte, max(n, 0))
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte   { return r.take(1)[0] }
func (r *reader) u16() uint16  { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *reader) u64() uint64  { return binary.LittleEndian.Uint64(r.take(8)) }
func (r *reader) f64() float64 { return math.Float64frombits(r.u64()) }

func (r *reader) str() string {
	if r.err != nil {
		return ""
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.err = errShort
		return ""
	}
	r.b = r.b[k:]
	return string(r.take(int(n)))
}

func (r *reader) version() {
	if v := r.byte(); r.err == nil && v != historyStorageVersion {
		r.err = fmt.Errorf("format version %d, want %d", v, historyStorageVersion)
	}
}

func decodeIDs(b []byte) ([]string, error) {
	r := reader{b: b}
	r.version()
	n, k := binary.Uvarint(r.b)
	if r.err != nil || k <= 0 || n > uint64(len(r.b)) {
		return nil, cmp.Or(r.err, errShort)
	}
	r.b = r.b[k:]
	ids := make([]string, 0, n)
	for range n {
		ids = append(ids, r.str())
	}
	return ids, r.err
}
