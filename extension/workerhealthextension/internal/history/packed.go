package history

import (
	"encoding/binary"
	"math"
)

// A worker's samples are kept packed (issue 24: the ring of 64-byte samples
// was 11.5 KiB of a worker's 13.6 KiB of history): the ring's slots are
// grouped by chunkSamples, the storage's groups, and each group is one byte
// slice in which every sample is written as the fields that differ from the
// sample before it in the slice (the first from zero), as varints. A
// sample of a steady worker is about 12 bytes instead of 64. The slots keep
// their meaning (storage.go writes and restores by group), only their
// representation changed: reading a slot decodes its group, writing one
// decodes, changes and re-encodes it (at most chunkSamples samples, once
// per worker per evaluation).

// chunkSamples is how many ring slots one packed chunk holds.
const chunkSamples = historyGroup

// The fields of a packed sample, by bit of its mask: the ones that change
// at every sample first, so a steady worker's mask is one byte.
const (
	fAt = iota
	fRSS
	fRole0   // .. fRole0+Roles-1
	fCPUMain = fRole0 + Roles
	fState   = fCPUMain + 1
	fRunsW   = fState + 1
	fRunsS   = fRunsW + 1
	fCap     = fRunsS + 1
	fSoft    = fCap + 1
	fRoleS0  = fSoft + 1 // .. fRoleS0+Roles-1
	fCPULim  = fRoleS0 + Roles
	fMask    = fCPULim + 1
)

// maxPackedSample bounds one packed sample: its mask and every field.
const maxPackedSample = binary.MaxVarintLen32 + binary.MaxVarintLen64 + (2+2*Roles)*binary.MaxVarintLen64 + 3*binary.MaxVarintLen16 + 2*4 + 2

func appendPacked(b []byte, prev, s *Sample) []byte {
	var mask uint32
	set := func(bit int, differs bool) {
		if differs {
			mask |= 1 << bit
		}
	}
	set(fAt, s.At != prev.At)
	set(fRSS, s.RSSKiB != prev.RSSKiB)
	for i := range Roles {
		set(fRole0+i, s.RoleRSS[i] != prev.RoleRSS[i])
		set(fRoleS0+i, s.RoleSoft[i] != prev.RoleSoft[i])
	}
	set(fCPUMain, math.Float32bits(s.CPUMain) != math.Float32bits(prev.CPUMain))
	set(fState, s.State != prev.State)
	set(fRunsW, s.RunsWorker != prev.RunsWorker)
	set(fRunsS, s.RunsScheduler != prev.RunsScheduler)
	set(fCap, s.Capacity != prev.Capacity)
	set(fSoft, s.SoftKiB != prev.SoftKiB)
	set(fCPULim, math.Float32bits(s.CPULimit) != math.Float32bits(prev.CPULimit))
	set(fMask, s.RoleMask != prev.RoleMask)

	b = binary.AppendUvarint(b, uint64(mask))
	has := func(bit int) bool { return mask&(1<<bit) != 0 }
	delta := func(bit int, v, p uint32) {
		if has(bit) {
			b = binary.AppendVarint(b, int64(v)-int64(p))
		}
	}
	if has(fAt) {
		b = binary.AppendVarint(b, s.At-prev.At)
	}
	delta(fRSS, s.RSSKiB, prev.RSSKiB)
	for i := range Roles {
		delta(fRole0+i, s.RoleRSS[i], prev.RoleRSS[i])
	}
	if has(fCPUMain) {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(s.CPUMain))
	}
	if has(fState) {
		b = append(b, s.State)
	}
	if has(fRunsW) {
		b = binary.AppendUvarint(b, uint64(s.RunsWorker))
	}
	if has(fRunsS) {
		b = binary.AppendUvarint(b, uint64(s.RunsScheduler))
	}
	if has(fCap) {
		b = binary.AppendUvarint(b, uint64(s.Capacity))
	}
	delta(fSoft, s.SoftKiB, prev.SoftKiB)
	for i := range Roles {
		delta(fRoleS0+i, s.RoleSoft[i], prev.RoleSoft[i])
	}
	if has(fCPULim) {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(s.CPULimit))
	}
	if has(fMask) {
		b = append(b, s.RoleMask)
	}
	return b
}

// readPacked decodes one sample written by appendPacked after prev and
// returns the rest of b. The chunks are only ever written by appendPacked,
// in memory, so b is well formed.
func readPacked(b []byte, prev *Sample) (Sample, []byte) {
	s := *prev
	m, n := binary.Uvarint(b)
	b = b[n:]
	mask := uint32(m)
	has := func(bit int) bool { return mask&(1<<bit) != 0 }
	varint := func() int64 {
		v, n := binary.Varint(b)
		b = b[n:]
		return v
	}
	uvarint := func() uint64 {
		v, n := binary.Uvarint(b)
		b = b[n:]
		return v
	}
	delta := func(bit int, v *uint32) {
		if has(bit) {
			*v = uint32(int64(*v) + varint())
		}
	}
	if has(fAt) {
		s.At += varint()
	}
	delta(fRSS, &s.RSSKiB)
	for i := range Roles {
		delta(fRole0+i, &s.RoleRSS[i])
	}
	if has(fCPUMain) {
		s.CPUMain = math.Float32frombits(binary.LittleEndian.Uint32(b))
		b = b[4:]
	}
	if has(fState) {
		s.State, b = b[0], b[1:]
	}
	if has(fRunsW) {
		s.RunsWorker = uint16(uvarint())
	}
	if has(fRunsS) {
		s.RunsScheduler = uint16(uvarint())
	}
	if has(fCap) {
		s.Capacity = uint16(uvarint())
	}
	delta(fSoft, &s.SoftKiB)
	for i := range Roles {
		delta(fRoleS0+i, &s.RoleSoft[i])
	}
	if has(fCPULim) {
		s.CPULimit = math.Float32frombits(binary.LittleEndian.Uint32(b))
		b = b[4:]
	}
	if has(fMask) {
		s.RoleMask, b = b[0], b[1:]
	}
	return s, b
}

// decodeChunk unpacks a chunk into out and returns how many samples it has.
func decodeChunk(c []byte, out *[chunkSamples]Sample) int {
	if len(c) == 0 {
		return 0
	}
	k := int(c[0])
	b := c[1:]
	var prev Sample
	for i := range k {
		out[i], b = readPacked(b, &prev)
		prev = out[i]
	}
	return k
}

// encodeChunk packs in[:k] into c's storage when it fits (a chunk is
// rewritten at every sample; its size changes little), else into a new
// slice of exactly its size.
func encodeChunk(c []byte, in *[chunkSamples]Sample, k int) []byte {
	var scratch [1 + chunkSamples*maxPackedSample]byte
	b := append(scratch[:0], byte(k))
	var prev Sample
	for i := range k {
		b = appendPacked(b, &prev, &in[i])
		prev = in[i]
	}
	if cap(c) >= len(b) && cap(c) <= len(b)+16 {
		return append(c[:0], b...)
	}
	return append(make([]byte, 0, len(b)+4), b...)
}

// sample is the sample in a slot (< count).
func (h *workerHistory) sample(slot int) Sample {
	var buf [chunkSamples]Sample
	decodeChunk(h.chunks[slot/chunkSamples], &buf)
	return buf[slot%chunkSamples]
}

// setSample writes a slot of a ring of size slots: one of the count
// slots, or the next (count).
func (h *workerHistory) setSample(slot int, s Sample, size int) {
	g, i := slot/chunkSamples, slot%chunkSamples
	var buf [chunkSamples]Sample
	k := 0
	if g < len(h.chunks) {
		k = decodeChunk(h.chunks[g], &buf)
	} else {
		if len(h.chunks) == cap(h.chunks) {
			// Grow by doubling, but never past the ring's chunks.
			grown := make([][]byte, len(h.chunks), min((size+chunkSamples-1)/chunkSamples, max(1, 2*cap(h.chunks))))
			copy(grown, h.chunks)
			h.chunks = grown
		}
		h.chunks = append(h.chunks, nil)
	}
	buf[i] = s
	k = max(k, i+1)
	h.chunks[g] = encodeChunk(h.chunks[g], &buf, k)
	h.n = max(h.n, slot+1)
}

// slots yields every sample in slot order (not time order once the ring
// wrapped).
func (h *workerHistory) slots(yield func(slot int, s Sample) bool) {
	var buf [chunkSamples]Sample
	for g, c := range h.chunks {
		k := decodeChunk(c, &buf)
		for i := range k {
			if !yield(g*chunkSamples+i, buf[i]) {
				return
			}
		}
	}
}

// inTimeOrder is every sample, oldest first.
func (h *workerHistory) inTimeOrder(size int) []Sample {
	out := make([]Sample, h.n)
	start := 0
	if h.n == size {
		start = h.next
	}
	for slot, s := range h.slots {
		out[(slot-start+h.n)%h.n] = s
	}
	return out
}
