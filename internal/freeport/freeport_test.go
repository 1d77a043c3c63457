package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPortsOutsideTheEphemeralRange: the ports are distinct, bindable and
// never ones the kernel hands to outgoing connections.
func TestPortsOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		require.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
		require.True(t, p >= lowest && (p < lo || p > hi), "port %d inside the ephemeral range %d-%d", p, lo, hi)
	}
	l, err := net.Listen("tcp", Addr(t))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// TestBusyPortSkipped: a port something listens on is not handed out.
func TestBusyPortSkipped(t *testing.T) {
	p := Port(t)
	mu.Lock()
	next = (next - 1 + total) % total // the next pick would be p again
	mu.Unlock()
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	require.NoError(t, err)
	defer l.Close()
	require.NotEqual(t, p, Port(t))
}
