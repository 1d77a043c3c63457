package history

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPackedSamplesRoundTrip: every field of every slot reads back as
// written, whatever the values (extremes, NaN bits, jumps back and forth),
// through appends, in-place updates and a wrapped ring.
func TestPackedSamplesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	u32 := func() uint32 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return math.MaxUint32
		default:
			return rng.Uint32()
		}
	}
	random := func() Sample {
		s := Sample{
			At: rng.Int64() - math.MaxInt64/2, RSSKiB: u32(), SoftKiB: u32(),
			CPUMain: math.Float32frombits(rng.Uint32()), CPULimit: math.Float32frombits(rng.Uint32()),
			RunsWorker: uint16(rng.Uint32()), RunsScheduler: uint16(rng.Uint32()), Capacity: uint16(rng.Uint32()),
			State: uint8(rng.Uint32()), RoleMask: uint8(rng.Uint32()),
		}
		for i := range Roles {
			s.RoleRSS[i], s.RoleSoft[i] = u32(), u32()
		}
		if rng.IntN(3) == 0 {
			s.At = math.MinInt64
		}
		return s
	}
	const size = 21 // not a multiple of a chunk
	h := &workerHistory{}
	want := make([]Sample, 0, size)
	for step := range 200 {
		s := random()
		if step%5 == 4 {
			s = want[len(want)-1] // a steady step: nothing changed
			s.At++
		}
		switch {
		case len(want) < size:
			h.setSample(len(want), s, size)
			want = append(want, s)
		default:
			slot := rng.IntN(size)
			h.setSample(slot, s, size)
			want[slot] = s
		}
		require.Equal(t, len(want), h.n)
		for slot, w := range want {
			got := h.sample(slot)
			require.Equal(t, math.Float32bits(w.CPUMain), math.Float32bits(got.CPUMain), "step %d slot %d", step, slot)
			require.Equal(t, math.Float32bits(w.CPULimit), math.Float32bits(got.CPULimit), "step %d slot %d", step, slot)
			w.CPUMain, w.CPULimit, got.CPUMain, got.CPULimit = 0, 0, 0, 0 // NaN != NaN
			require.Equal(t, w, got, "step %d slot %d", step, slot)
		}
	}
	require.LessOrEqual(t, cap(h.chunks), (size+chunkSamples-1)/chunkSamples)
}

// TestAddKeepsTheLastSize: add writes the new sample into the chunk it
// decoded for the last one when both are in it, else through setSample; a
// ring of 21 (not a multiple of a chunk) wraps across chunks, and a sample
// in the same step replaces the last.
func TestAddKeepsTheLastSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const size, res = 21, 10
	h := &workerHistory{}
	var want []Sample
	for step := range 100 {
		s := Sample{At: int64(step) * res, RSSKiB: rng.Uint32(), State: uint8(step % 3)}
		h.add(s, res, size)
		want = append(want, s)
		if step%7 == 3 { // the same step again: replaces it
			s.At++
			s.RSSKiB = rng.Uint32()
			h.add(s, res, size)
			want[len(want)-1] = s
		}
		last := want[max(0, len(want)-size):]
		require.Equal(t, last, h.inTimeOrder(size), "step %d", step)
	}
	// Out of order: ignored.
	h.add(Sample{At: 0, RSSKiB: 1}, res, size)
	require.Equal(t, want[len(want)-size:], h.inTimeOrder(size))
}

// chunkBytes is the memory the packed samples take (TestHistoryMemory's figure).
func (h *workerHistory) chunkBytes() int {
	n := cap(h.chunks) * 24
	for _, c := range h.chunks {
		n += cap(c)
	}
	return n
}
