// Package freeport hands tests loopback ports that stay free until the
// process they are given to binds them.
//
// A port from listen(":0") comes from the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), the same pool the kernel draws the source
// port of every outgoing connection from. Closed and passed to a collector
// that binds it a second later, it is taken meanwhile by one of the
// hundreds of connections the suite's parallel scenarios open: CI saw
// "bind: address already in use" for ports picked this way. Ports outside
// that range are never handed out by the kernel, so here they are picked
// there, each once per process (a sequence from a random start), and each
// checked free by a listen before it is returned; another process picking
// the same port at the same instant is the only collision left.
package freeport // import "github.com/workerwatch/workerwatch/internal/freeport"

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the first port considered: below it are the well-known and
// registered services a machine may run (Prometheus's 9090, Redis's 6379).
const lowest = 10000

var (
	mu     sync.Mutex
	ranges [][2]int // the ports outside the ephemeral range, from lowest
	total  int
	next   = -1 // index into the ports of ranges; -1 before the first pick
)

// Port returns a loopback TCP port that was free and that this process has
// not handed out before. It fails the test when none is left.
func Port(tb testing.TB) int {
	tb.Helper()
	p, err := Pick()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Addr is Port as "127.0.0.1:port".
func Addr(tb testing.TB) string {
	tb.Helper()
	return "127.0.0.1:" + strconv.Itoa(Port(tb))
}

// Pick is Port for code without a testing.TB (a TestMain).
func Pick() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if next < 0 {
		lo, hi := ephemeralRange()
		for _, r := range [][2]int{{lowest, lo - 1}, {hi + 1, 65535}} {
			if r[1] >= r[0] {
				ranges = append(ranges, r)
				total += r[1] - r[0] + 1
			}
		}
		if total > 0 {
			next = rand.IntN(total) //nolint:gosec // a start that differs between processes, not a secret
		}
	}
	// Each port once per process: a sequence through every candidate, from
	// a random start so that processes started together begin apart.
	for tried := 0; tried < total; tried++ {
		p := portAt(next)
		next = (next + 1) % total
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			_ = l.Close()
			return p, nil
		}
	}
	// The ephemeral range covers every port (a tuned machine): the kernel's
	// pick, with the race this package exists to avoid.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("freeport: no free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portAt(i int) int {
	for _, r := range ranges {
		n := r[1] - r[0] + 1
		if i < n {
			return r[0] + i
		}
		i -= n
	}
	panic("freeport: index out of range")
}

// ephemeralRange reads the kernel's range; Linux's default when it cannot.
// Other systems have their own defaults (macOS 49152-65535, Windows
// 49152-65535): there the range read fails and 32768-65535 covers both.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 65535
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}
