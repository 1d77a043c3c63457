//go:build linux

package procevents // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/procevents"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procCnMcastIgnore = 2

	procEventNone = 0x00000000
	procEventFork = 0x00000001
	procEventExit = 0x80000000

	nlmsgHdrLen = 16
	cnMsgLen    = 20
	// struct proc_event starts after nlmsghdr + cn_msg; its event_data after
	// what (u32), cpu (u32), timestamp_ns (u64).
	procEvOff   = nlmsgHdrLen + cnMsgLen
	procDataOff = procEvOff + 16

	// rcvBuf is the socket receive buffer asked for: about 100k events of
	// burst (each takes ~600 bytes of skb) before ENOBUFS.
	rcvBuf = 64 << 20
	// batchPause is the reader's pause between two drains of the socket.
	batchPause = 20 * time.Millisecond
	// maxUnseenExits bounds a group's queue between two syncs.
	maxUnseenExits = 1 << 20
)

// Exit is the exit of a member no walk had seen when it exited.
type Exit struct {
	Pid int32
	Ns  uint64 // CLOCK_MONOTONIC ns of the exit
}

// RootExit is the exit of a group's root process (SetRoot), as the kernel
// reported it.
type RootExit struct {
	Pid int32
	// Status is the wait status (waitpid(2)): the exit code in bits 8-15,
	// or the signal that ended the process in bits 0-6.
	Status uint32
	Ns     uint64 // CLOCK_MONOTONIC ns of the exit
}

// Signaled reports whether the process was ended by a signal, and which.
func (e RootExit) Signaled() (int, bool) {
	sig := int(e.Status & 0x7f)
	return sig, sig != 0
}

// Code is the exit code of a process that exited on its own.
func (e RootExit) Code() int { return int(e.Status>>8) & 0xff }

// entry is one live member tgid of a group.
type entry struct {
	g *Group
	// seen: a walk has read (and classified) this process, so the caller
	// counts its start and exit.
	seen bool
	// addedGen, seenGen: the group's generation when a fork added the entry
	// and when a walk last saw it (see Sync).
	addedGen, seenGen uint32
}

// Group is the event side of one worker: the live member tgids and the
// exits of members no walk saw. Its fields are guarded by its Conn's lock.
type Group struct {
	gen    uint32
	pids   map[int32]struct{}
	exits  []Exit
	armed  bool   // seeded by a previous Sync: the interval since is covered
	since  uint64 // CLOCK_MONOTONIC ns of its creation
	missed bool   // events lost (ENOBUFS or a sequence gap) since the last Sync
	// root is the group's root process (SetRoot); rootExit its exit, once
	// the kernel reported it.
	root     int32
	rootExit *RootExit
}

// Conn is a subscription to the kernel's process events.
type Conn struct {
	f    *os.File
	rc   syscall.RawConn // of f, for non-blocking reads under mu
	done chan struct{}
	stop chan struct{}

	// mu guards the maps below and every read of the socket: a read and
	// the handling of what it read are one step, so that the reader and
	// Sync (which drains the socket first) never handle events out of order.
	mu      sync.Mutex
	buf     []byte // receive buffer, used under mu
	owner   map[int32]*entry
	groups  map[*Group]struct{}
	lastSeq map[uint32]uint32 // per CPU, to count lost events
	// roots maps each group's root pid to its group (SetRoot).
	roots map[int32]*Group
	// rootExited gets a value (coalesced) when a root exits.
	rootExited chan struct{}

	lost atomic.Int64          // events lost (sequence gaps), for internal telemetry
	err  atomic.Pointer[error] // why the reader stopped, nil while it runs
	// ackID marks this Conn's requests (see control).
	ackID uint32
}

func newConn() *Conn {
	return &Conn{
		buf:     make([]byte, 64<<10),
		done:    make(chan struct{}),
		stop:    make(chan struct{}),
		owner:   map[int32]*entry{},
		groups:  map[*Group]struct{}{},
		lastSeq: map[uint32]uint32{},
		roots:   map[int32]*Group{},
		// Buffered: a root's exit is never lost while the scraper is busy,
		// and several exits before it looks are one wake-up.
		rootExited: make(chan struct{}, 1),
		// Unique on the host: the pid (at most 22 bits), and a count of
		// this process's Conns.
		ackID: uint32(os.Getpid())<<8 | conns.Add(1)&0xff,
	}
}

// conns counts the Conns this process opened (see ackID).
var conns atomic.Uint32

// Open subscribes to the proc connector and starts the reader goroutine.
// It fails without CAP_NET_ADMIN in the host's initial user and pid
// namespaces.
func Open() (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	// A generous receive buffer: forks come in bursts. SO_RCVBUFFORCE needs
	// CAP_NET_ADMIN (which the subscription needs anyway); SO_RCVBUF is
	// capped by net.core.rmem_max.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("joining the proc connector group: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "netlink-proc-connector")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c := newConn()
	c.f, c.rc = f, rc
	if err := c.control(procCnMcastListen); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("PROC_CN_MCAST_LISTEN: %w", err)
	}
	// The kernel answers with a PROC_EVENT_NONE carrying an errno (EPERM
	// without CAP_NET_ADMIN). Outside the initial user and pid namespaces
	// older kernels answer nothing: no ack and no event within the wait is
	// a failure too.
	if err := c.waitAck(2 * time.Second); err != nil {
		_ = c.control(procCnMcastIgnore)
		_ = f.Close()
		return nil, err
	}
	go c.run()
	return c, nil
}

// control sends PROC_CN_MCAST_LISTEN or _IGNORE. Its cn_msg.ack is this
// Conn's ackID: the kernel answers with ackID+1, which tells our answer from
// the ones it broadcasts for other processes' requests.
func (c *Conn) control(op uint32) error {
	var b [nlmsgHdrLen + cnMsgLen + 4]byte
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))       // nlmsg_len
	ne.PutUint16(b[4:], unix.NLMSG_DONE)      // nlmsg_type
	ne.PutUint32(b[8:], 0)                    // nlmsg_seq
	ne.PutUint32(b[12:], uint32(os.Getpid())) // nlmsg_pid
	ne.PutUint32(b[16:], cnIdxProc)
	ne.PutUint32(b[20:], cnValProc)
	ne.PutUint32(b[28:], c.ackID) // cn_msg.ack
	ne.PutUint16(b[32:], 4)       // cn_msg.len
	ne.PutUint32(b[36:], op)
	var serr error
	if err := c.rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), b[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil {
		return err
	}
	return serr
}

func (c *Conn) waitAck(d time.Duration) error {
	_ = c.f.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.f.SetReadDeadline(time.Time{}) }()
	buf := make([]byte, 8192)
	events := false
	for {
		n, err := c.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if events {
					return nil // delivered although not acknowledged
				}
				return errors.New("no answer from the proc connector (not in the initial user and pid namespaces?)")
			}
			if errors.Is(err, unix.ENOBUFS) {
				return nil
			}
			return err
		}
		b := buf[:n]
		for len(b) >= nlmsgHdrLen {
			l := int(binary.NativeEndian.Uint32(b))
			if l < nlmsgHdrLen || l > len(b) {
				break
			}
			m := b[:l]
			if len(m) >= procDataOff+8 && binary.NativeEndian.Uint32(m[16:]) == cnIdxProc {
				if binary.NativeEndian.Uint32(m[procEvOff:]) != procEventNone {
					events = true
				} else if binary.NativeEndian.Uint32(m[28:]) == c.ackID+1 {
					// Our answer (another process's is for its request).
					if e := binary.NativeEndian.Uint32(m[procDataOff:]); e != 0 {
						return unix.Errno(e)
					}
					return nil
				}
			}
			b = b[min((l+3)&^3, len(b)):]
		}
	}
}

// Close unsubscribes, closes the socket and waits for the reader.
func (c *Conn) Close() {
	_ = c.control(procCnMcastIgnore)
	close(c.stop)
	_ = c.f.Close()
	<-c.done
}

// Err is why the reader stopped reading events (an unexpected socket
// error), or nil while it reads. Once it is set, Sync reports no interval
// as covered.
func (c *Conn) Err() error {
	if e := c.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Lost is the number of events the kernel dropped so far (receive buffer
// overflow), found by the gaps in its per-CPU sequence numbers.
func (c *Conn) Lost() int64 { return c.lost.Load() }

func (c *Conn) run() {
	defer close(c.done)
	batch := time.NewTimer(batchPause)
	defer batch.Stop()
	for {
		// Drain what is queued, then sleep a little before the next wait:
		// a busy host wakes the reader at most 1/batchPause times a
		// second instead of once per event.
		var rerr error
		err := c.rc.Read(func(fd uintptr) bool {
			c.mu.Lock()
			got, err := c.drain(int(fd))
			c.mu.Unlock()
			if err != nil {
				rerr = err
				return true
			}
			return got
		})
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				c.fail(err)
			}
			return
		}
		if rerr != nil {
			c.fail(rerr)
			return
		}
		batch.Reset(batchPause)
		select {
		case <-c.stop:
			return
		case <-batch.C:
		}
	}
}

// drain reads and handles every message queued on the socket, without
// blocking; got reports whether there was any. c.mu is held.
func (c *Conn) drain(fd int) (got bool, err error) {
	for {
		n, _, err := unix.Recvfrom(fd, c.buf, unix.MSG_DONTWAIT)
		switch {
		case err == nil:
			if n == 0 {
				return true, nil
			}
			got = true
			c.handle(c.buf[:n])
		case errors.Is(err, unix.EAGAIN):
			return got, nil
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.ENOBUFS):
			// The receive buffer overflowed: events were dropped. The
			// sequence gap that follows counts them; the interval falls
			// back to the sampling bound.
			c.markMissed()
			got = true
		default:
			return got, err
		}
	}
}

// fail stops using the events after an unexpected read error.
func (c *Conn) fail(err error) { c.err.Store(&err) }

// drainQueued handles the events queued on the socket now, ahead of the
// reader (Sync, RootExit). c.mu is held.
func (c *Conn) drainQueued() {
	if c.rc == nil || c.Err() != nil {
		return
	}
	var derr error
	if err := c.rc.Control(func(fd uintptr) { _, derr = c.drain(int(fd)) }); err == nil && derr != nil {
		c.markMissed()
	}
}

func (c *Conn) markMissed() {
	for g := range c.groups {
		g.missed = true
	}
}

// handle processes one datagram (one or more netlink messages). c.mu is held.
func (c *Conn) handle(b []byte) {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		l := int(ne.Uint32(b))
		if l < nlmsgHdrLen || l > len(b) {
			return
		}
		m := b[:l]
		b = b[min((l+3)&^3, len(b)):]
		if len(m) < procDataOff || ne.Uint32(m[16:]) != cnIdxProc {
			continue
		}
		what := ne.Uint32(m[procEvOff:])
		// Lost events: the kernel numbers the messages per CPU. Every
		// message counts, the PROC_EVENT_NONE acknowledgements that any
		// process subscribing or unsubscribing makes the kernel broadcast to
		// every listener included: current kernels (6.18 here) number them
		// like events. Older ones send them with cpu -1 and no number. Taken
		// for gaps, they made every interval in which another collector or
		// test started fall back to the sampling bound (issue 14.8).
		seq, cpu := ne.Uint32(m[24:]), ne.Uint32(m[procEvOff+4:])
		if cpu == ^uint32(0) {
			continue
		}
		if last, ok := c.lastSeq[cpu]; ok {
			if gap := seq - last - 1; gap > 0 && gap < 1<<31 {
				c.lost.Add(int64(gap))
				c.markMissed()
			}
		}
		c.lastSeq[cpu] = seq
		if what == procEventNone {
			continue
		}
		d := m[procDataOff:]
		switch what {
		case procEventFork:
			if len(d) < 16 {
				continue
			}
			ptgid, cpid, ctgid := int32(ne.Uint32(d[4:])), int32(ne.Uint32(d[8:])), int32(ne.Uint32(d[12:]))
			if cpid != ctgid {
				continue // a thread
			}
			pe := c.owner[ptgid]
			if pe == nil {
				continue
			}
			g := pe.g
			if ne.Uint64(m[procEvOff+8:]) < g.since {
				// Forked before the group was created, read late: the
				// first walk is the baseline, not a start.
				continue
			}
			if old := c.owner[ctgid]; old != nil {
				if old.g == g && old.seen {
					// A walk saw the child before its fork event was read
					// (the reader lags): the walk counts it.
					continue
				}
				delete(old.g.pids, ctgid) // a missed exit
			}
			c.owner[ctgid] = &entry{g: g, addedGen: g.gen}
			g.pids[ctgid] = struct{}{}
		case procEventExit:
			if len(d) < 8 {
				continue
			}
			pid, tgid := int32(ne.Uint32(d)), int32(ne.Uint32(d[4:]))
			if pid != tgid {
				continue // a thread (or a leader exiting before its threads: not the process's end)
			}
			if g := c.roots[tgid]; g != nil && len(d) >= 12 {
				delete(c.roots, tgid)
				g.rootExit = &RootExit{Pid: tgid, Status: ne.Uint32(d[8:]), Ns: ne.Uint64(m[procEvOff+8:])}
				select {
				case c.rootExited <- struct{}{}:
				default:
				}
			}
			e := c.owner[tgid]
			if e == nil {
				continue
			}
			delete(c.owner, tgid)
			delete(e.g.pids, tgid)
			if !e.seen && len(e.g.exits) < maxUnseenExits {
				e.g.exits = append(e.g.exits, Exit{Pid: tgid, Ns: ne.Uint64(m[procEvOff+8:])})
			}
		}
	}
}

// NewGroup starts tracking one worker. Forks made before this call are
// never counted (the first walk is the baseline).
func (c *Conn) NewGroup() *Group {
	g := &Group{pids: map[int32]struct{}{}, since: MonotonicNs()}
	c.mu.Lock()
	c.groups[g] = struct{}{}
	c.mu.Unlock()
	return g
}

// Sync is called after a worker's walk with the pids the walk found
// (zombies included): it marks them seen (adding those the events did not
// know), drops members the walk no longer finds that were known before it
// began (they left the tree), and hands the exits of never-seen members to
// the caller, appended to out. It reports whether the interval since the
// previous Sync was covered without loss (else the caller falls back to its
// sampling bound).
func (c *Conn) Sync(g *Group, walked []int32, out []Exit) ([]Exit, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The kernel queues an event on the socket when it happens, so draining
	// it now handles every fork and exit from before the walk: a reader
	// running late cannot put an event in the wrong interval (where the
	// walk, or the sampling bound after a loss, counted it already).
	c.drainQueued()
	missed := g.missed
	covered := g.armed && !missed && c.Err() == nil
	out = append(out, g.exits...)
	g.exits = g.exits[:0]
	g.missed = false
	g.armed = true
	for _, pid := range walked {
		// Zombies too: seen (and counted) by the walk, their fork and exit
		// events may not have been read yet (the reader lags).
		e := c.owner[pid]
		if e == nil || e.g != g {
			if e != nil {
				delete(e.g.pids, pid)
			}
			e = &entry{g: g, addedGen: g.gen}
			c.owner[pid] = e
			g.pids[pid] = struct{}{}
		}
		e.seen = true
		e.seenGen = g.gen
	}
	for pid := range g.pids {
		e := c.owner[pid]
		// After a loss the interval is counted by the sampling bound, which
		// may already include a child known only from its fork event (its
		// parent reaped it, its exit event not read yet): such a child must
		// not also be counted by its exit event in the next interval. It is
		// forgotten; the bound stays a lower bound.
		if (e.seenGen != g.gen && e.addedGen != g.gen) || (missed && !e.seen) {
			delete(g.pids, pid)
			delete(c.owner, pid)
		}
	}
	g.gen++
	return out, covered
}

// SetRoot names the group's root process: its exit is kept for RootExit
// and signaled on RootExited. A pid of 0 unsets it.
func (c *Conn) SetRoot(g *Group, pid int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.root != 0 && c.roots[g.root] == g {
		delete(c.roots, g.root)
	}
	g.root, g.rootExit = pid, nil
	if pid != 0 {
		c.roots[pid] = g
	}
}

// RootExit returns the exit of the group's root pid, once the kernel
// reported it (the socket is drained first, so an exit that happened before
// the call is seen).
func (c *Conn) RootExit(g *Group, pid int32) (RootExit, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drainQueued()
	if g.rootExit == nil || g.rootExit.Pid != pid {
		return RootExit{}, false
	}
	return *g.rootExit, true
}

// RootEnded reports whether the kernel reported the exit of the group's
// root pid (among the events read so far: no drain). The exit event comes
// before the process is a zombie, so /proc may still show it running.
func (c *Conn) RootEnded(g *Group, pid int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return g.rootExit != nil && g.rootExit.Pid == pid
}

// RootExited receives a value when the root of a group exited (several
// exits may share one value).
func (c *Conn) RootExited() <-chan struct{} { return c.rootExited }

// Forget drops a group that is no longer reported.
func (c *Conn) Forget(g *Group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.root != 0 && c.roots[g.root] == g {
		delete(c.roots, g.root)
	}
	for pid := range g.pids {
		delete(c.owner, pid)
	}
	delete(c.groups, g)
}

// BootOffsetNs is CLOCK_BOOTTIME - CLOCK_MONOTONIC (time suspended): the
// exit timestamps are monotonic, process start times count from boot.
func BootOffsetNs() uint64 {
	var b, m unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &b) != nil || unix.ClockGettime(unix.CLOCK_MONOTONIC, &m) != nil {
		return 0
	}
	return max(uint64(b.Nano()), uint64(m.Nano())) - uint64(m.Nano())
}

// MonotonicNs is CLOCK_MONOTONIC, the clock of the events' timestamps.
func MonotonicNs() uint64 {
	var t unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &t) != nil {
		return 0
	}
	return uint64(t.Nano())
}
