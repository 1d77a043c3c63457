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

// chunkBytes is the memory the packed samples take (TestHistoryMemory's figure).
func (h *workerHistory) chunkBytes() int {
	n := cap(h.chunks) * 24
	for _, c := range h.chunks {
		n += cap(c)
	}
	return n
}
