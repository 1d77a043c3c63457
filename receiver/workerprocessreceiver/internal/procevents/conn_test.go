//go:build linux

package procevents

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// procMsg builds one proc connector message as the kernel sends it.
func procMsg(seq, what uint32, data ...uint32) []byte {
	b := make([]byte, procDataOff+4*len(data))
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint32(b[16:], cnIdxProc)
	ne.PutUint32(b[20:], cnValProc)
	ne.PutUint32(b[24:], seq)
	ne.PutUint32(b[procEvOff:], what)
	ne.PutUint32(b[procEvOff+4:], 0) // the cpu the event happened on
	ne.PutUint64(b[procEvOff+8:], MonotonicNs())
	for i, d := range data {
		ne.PutUint32(b[procDataOff+4*i:], d)
	}
	return b
}

// TestProcessEventsHandle feeds synthetic messages: forks of members join
// (grandchildren too), thread forks/exits are ignored, exits of never-seen
// members are handed over once, sequence gaps count lost events.
func TestProcessEventsHandle(t *testing.T) {
	p := newConn()
	g := p.NewGroup()
	_, covered := p.Sync(g, []int32{100}, nil)
	assert.False(t, covered, "first sync: not armed yet")

	var dgram []byte
	dgram = append(dgram, procMsg(1, procEventFork, 100, 100, 200, 200)...) // child of the root
	dgram = append(dgram, procMsg(2, procEventFork, 200, 200, 201, 201)...) // grandchild
	dgram = append(dgram, procMsg(3, procEventFork, 100, 100, 300, 100)...) // a thread of the root
	dgram = append(dgram, procMsg(4, procEventFork, 999, 999, 500, 500)...) // not a member's child
	dgram = append(dgram, procMsg(5, procEventExit, 201, 201, 0, 17)...)
	dgram = append(dgram, procMsg(6, procEventExit, 300, 100, 0, 17)...) // thread exit
	dgram = append(dgram, procMsg(7, procEventExit, 500, 500, 0, 17)...)
	early := procMsg(8, procEventFork, 100, 100, 600, 600) // forked before the first seed, read late
	binary.NativeEndian.PutUint64(early[procEvOff+8:], 1)
	dgram = append(dgram, early...)
	p.handle(dgram)
	assert.Len(t, g.pids, 2) // 100, 200
	assert.Zero(t, p.lost.Load())

	p.handle(procMsg(11, procEventExit, 200, 200, 0, 17)) // 9 and 10 lost
	assert.Equal(t, int64(2), p.lost.Load())

	// The root's walk failed (no pid walked).
	exits, covered := p.Sync(g, nil, nil)
	assert.False(t, covered, "events were lost in the interval")
	assert.ElementsMatch(t, []int32{201, 200}, []int32{exits[0].Pid, exits[1].Pid})
	exits, covered = p.Sync(g, nil, nil)
	assert.True(t, covered)
	assert.Empty(t, exits)

	// A child known only from its fork event when events are lost: its
	// interval falls back to the sampling bound, which may count it already
	// (reaped, its exit not read yet), so its exit event must not count it
	// again in the next interval.
	root := []int32{100} // the root, walked again
	_, covered = p.Sync(g, root, nil)
	require.True(t, covered)
	p.handle(procMsg(12, procEventFork, 100, 100, 700, 700))
	require.Contains(t, g.pids, int32(700))
	p.markMissed()
	_, covered = p.Sync(g, root, nil)
	assert.False(t, covered)
	p.handle(procMsg(13, procEventExit, 700, 700, 0, 0))
	exits, covered = p.Sync(g, root, nil)
	assert.True(t, covered)
	assert.Empty(t, exits, "counted by the sampling bound, not again")
	p.lastSeq[0] = 11 // the test's sequence numbers restart below

	// The reader lags behind a scrape: a child the walk saw (alive, or as a
	// zombie) before its fork/exit events were read is the scrape's.
	p.handle(procMsg(12, procEventFork, 100, 100, 400, 400))
	walked := []int32{100, 400, 401} // 400 as a zombie
	_, covered = p.Sync(g, walked, nil)
	assert.True(t, covered)
	p.handle(procMsg(13, procEventFork, 100, 100, 401, 401))
	p.handle(procMsg(14, procEventExit, 400, 400, 0, 0))
	p.handle(procMsg(15, procEventExit, 401, 401, 0, 0))
	// The root was seen: its exit is the scrape's to count.
	p.handle(procMsg(16, procEventExit, 100, 100, 0, 0))
	exits, _ = p.Sync(g, walked, nil)
	assert.Empty(t, exits)
	assert.Zero(t, p.lost.Load()-2)
}

// Other processes subscribing and unsubscribing make the kernel broadcast
// PROC_EVENT_NONE acknowledgements to every listener, numbered per CPU like
// events on current kernels: they are no lost events. (Counted as lost, each
// made its interval fall back to the sampling bound: 32 % of the churn test's
// short-lived children counted instead of 100 %.) An acknowledgement with
// cpu -1, as older kernels send them, takes no number.
func TestAcknowledgementsAreNoLoss(t *testing.T) {
	p := newConn()
	g := p.NewGroup()
	_, _ = p.Sync(g, []int32{100}, nil)
	p.handle(procMsg(1, procEventFork, 100, 100, 200, 200))
	p.handle(procMsg(2, procEventNone, 0)) // another process's PROC_CN_MCAST_LISTEN
	oldAck := procMsg(0, procEventNone, 0)
	binary.NativeEndian.PutUint32(oldAck[procEvOff+4:], ^uint32(0))
	p.handle(oldAck)
	p.handle(procMsg(3, procEventExit, 200, 200, 0, 0))
	assert.Zero(t, p.Lost())
	exits, covered := p.Sync(g, []int32{100}, nil)
	assert.True(t, covered, "no event was lost: the interval is exact")
	require.Len(t, exits, 1)
	assert.Equal(t, int32(200), exits[0].Pid)

	// A real gap still counts.
	p.handle(procMsg(5, procEventFork, 100, 100, 201, 201))
	assert.Equal(t, int64(1), p.Lost())
	_, covered = p.Sync(g, []int32{100}, nil)
	assert.False(t, covered)
}

// TestRootExit: the exit of a group's root is kept with its wait status
// (code or signal) and signaled once; other exits, and a root unset or
// replaced, are not.
func TestRootExit(t *testing.T) {
	p := newConn()
	g := p.NewGroup()
	p.SetRoot(g, 100)
	_, ok := p.RootExit(g, 100)
	assert.False(t, ok, "not exited yet")

	p.handle(procMsg(1, procEventExit, 101, 101, 0, 17)) // not the root
	select {
	case <-p.RootExited():
		t.Fatal("a non-root exit was signaled")
	default:
	}
	p.handle(procMsg(2, procEventExit, 100, 100, 9, 17)) // SIGKILL: status 9
	select {
	case <-p.RootExited():
	default:
		t.Fatal("the root's exit was not signaled")
	}
	e, ok := p.RootExit(g, 100)
	require.True(t, ok)
	sig, signaled := e.Signaled()
	assert.True(t, signaled)
	assert.Equal(t, 9, sig)
	_, ok = p.RootExit(g, 200)
	assert.False(t, ok, "another pid's exit")

	// A new root: exits with code 3 (status 3<<8).
	p.SetRoot(g, 200)
	_, ok = p.RootExit(g, 100)
	assert.False(t, ok, "the old root's exit is dropped with SetRoot")
	p.handle(procMsg(3, procEventExit, 200, 200, 3<<8, 17))
	e, ok = p.RootExit(g, 200)
	require.True(t, ok)
	_, signaled = e.Signaled()
	assert.False(t, signaled)
	assert.Equal(t, 3, e.Code())

	// Unset, then forgotten: no more root.
	p.SetRoot(g, 300)
	p.Forget(g)
	<-p.RootExited()
	p.handle(procMsg(4, procEventExit, 300, 300, 0, 17))
	select {
	case <-p.RootExited():
		t.Fatal("a forgotten group's root exit was signaled")
	default:
	}
}
