package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

// Exact fork/exit accounting through the Linux proc connector
// (NETLINK_CONNECTOR, group CN_IDX_PROC). /proc only shows the processes
// alive at a scrape; a child that starts and exits between two scrapes is
// invisible there. The kernel sends one message per fork and per exit on the
// host; a reader goroutine keeps, per tracked worker, the set of live member
// tgids (seeded from every scrape's tree walk, extended by forks whose parent
// is a member, shrunk by exits) and queues the exits of members no scrape has
// seen. The scraper counts those as started+exited in the worker's default
// role; members a scrape has seen are counted by the scrape itself, in the
// role they were classified with, so no process is counted twice.

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

	// procEventsRcvBuf is the socket receive buffer asked for: about 100k
	// events of burst (each takes ~600 bytes of skb) before ENOBUFS.
	procEventsRcvBuf = 64 << 20
	// procEventsBatch is the reader's pause between two drains of the socket.
	procEventsBatch = 20 * time.Millisecond
	// maxUnseenExits bounds a worker's queue between two scrapes.
	maxUnseenExits = 1 << 20
)

// Values of the process_events key.
const (
	processEventsAuto    = "auto"
	processEventsNetlink = "netlink"
	processEventsOff     = "off"
)

// evEntry is one live member tgid of a tracked worker.
type evEntry struct {
	w *evWorker
	// seen: a scrape has read (and classified) this process, so the scrape
	// counts its start and exit.
	seen bool
	// addedGen, seenGen: the worker's generation when a fork added the entry
	// and when a walk last saw it (see sync).
	addedGen, seenGen uint32
}

// evExit is the exit of a member no scrape had seen when it exited.
type evExit struct {
	pid int32
	ns  uint64 // CLOCK_MONOTONIC ns of the exit
}

// evWorker is the event side of one worker.
type evWorker struct {
	gen    uint32
	pids   map[int32]struct{}
	exits  []evExit
	armed  bool   // seeded by a previous scrape: the interval since is covered
	since  uint64 // CLOCK_MONOTONIC ns of the first seed
	missed bool   // events lost (ENOBUFS or a sequence gap) since the last sync
}

type procEvents struct {
	f    *os.File
	rc   syscall.RawConn // of f, for non-blocking reads under mu
	done chan struct{}
	stop chan struct{}

	// mu guards the maps below and every read of the socket: a read and
	// the handling of what it read are one step, so that the reader and
	// sync (which drains the socket first) never handle events out of order.
	mu      sync.Mutex
	buf     []byte // receive buffer, used under mu
	owner   map[int32]*evEntry
	workers map[*worker]*evWorker
	lastSeq map[uint32]uint32 // per CPU, to count lost events

	lost   atomic.Int64 // events lost (sequence gaps), for internal telemetry
	broken atomic.Bool  // the reader stopped on an unexpected error
	errMu  sync.Mutex
	err    error
}

// openProcEvents subscribes to the proc connector. It is a variable so that
// tests can simulate a host where the subscription fails.
var openProcEvents = func() (*procEvents, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	// A generous receive buffer: forks come in bursts. SO_RCVBUFFORCE needs
	// CAP_NET_ADMIN (which the subscription needs anyway); SO_RCVBUF is
	// capped by net.core.rmem_max.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, procEventsRcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, procEventsRcvBuf)
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
	p := &procEvents{
		f:       f,
		rc:      rc,
		buf:     make([]byte, 64<<10),
		done:    make(chan struct{}),
		stop:    make(chan struct{}),
		owner:   map[int32]*evEntry{},
		workers: map[*worker]*evWorker{},
		lastSeq: map[uint32]uint32{},
	}
	if err := p.control(procCnMcastListen); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("PROC_CN_MCAST_LISTEN: %w", err)
	}
	// The kernel answers with a PROC_EVENT_NONE carrying an errno (EPERM
	// without CAP_NET_ADMIN). Outside the initial user and pid namespaces
	// older kernels answer nothing: no ack and no event within the wait is
	// a failure too.
	if err := p.waitAck(2 * time.Second); err != nil {
		_ = p.control(procCnMcastIgnore)
		_ = f.Close()
		return nil, err
	}
	go p.run()
	return p, nil
}

// control sends PROC_CN_MCAST_LISTEN or _IGNORE.
func (p *procEvents) control(op uint32) error {
	var b [nlmsgHdrLen + cnMsgLen + 4]byte
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))       // nlmsg_len
	ne.PutUint16(b[4:], unix.NLMSG_DONE)      // nlmsg_type
	ne.PutUint32(b[8:], 0)                    // nlmsg_seq
	ne.PutUint32(b[12:], uint32(os.Getpid())) // nlmsg_pid
	ne.PutUint32(b[16:], cnIdxProc)
	ne.PutUint32(b[20:], cnValProc)
	ne.PutUint16(b[32:], 4) // cn_msg.len
	ne.PutUint32(b[36:], op)
	var serr error
	if err := p.rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), b[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return serr != unix.EAGAIN
	}); err != nil {
		return err
	}
	return serr
}

func (p *procEvents) waitAck(d time.Duration) error {
	_ = p.f.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = p.f.SetReadDeadline(time.Time{}) }()
	buf := make([]byte, 8192)
	events := false
	for {
		n, err := p.f.Read(buf)
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
				if binary.NativeEndian.Uint32(m[procEvOff:]) == procEventNone {
					if e := binary.NativeEndian.Uint32(m[procDataOff:]); e != 0 {
						return unix.Errno(e)
					}
					return nil
				}
				events = true
			}
			b = b[min((l+3)&^3, len(b)):]
		}
	}
}

// close unsubscribes, closes the socket and waits for the reader.
func (p *procEvents) close() {
	_ = p.control(procCnMcastIgnore)
	close(p.stop)
	_ = p.f.Close()
	<-p.done
}

func (p *procEvents) run() {
	defer close(p.done)
	batch := time.NewTimer(procEventsBatch)
	defer batch.Stop()
	for {
		// Drain what is queued, then sleep a little before the next wait:
		// a busy host wakes the reader at most 1/procEventsBatch times a
		// second instead of once per event.
		var rerr error
		err := p.rc.Read(func(fd uintptr) bool {
			p.mu.Lock()
			got, err := p.drain(int(fd))
			p.mu.Unlock()
			if err != nil {
				rerr = err
				return true
			}
			return got
		})
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				p.fail(err)
			}
			return
		}
		if rerr != nil {
			p.fail(rerr)
			return
		}
		batch.Reset(procEventsBatch)
		select {
		case <-p.stop:
			return
		case <-batch.C:
		}
	}
}

// drain reads and handles every message queued on the socket, without
// blocking; got reports whether there was any. p.mu is held.
func (p *procEvents) drain(fd int) (got bool, err error) {
	for {
		n, _, err := unix.Recvfrom(fd, p.buf, unix.MSG_DONTWAIT)
		switch err {
		case nil:
			if n == 0 {
				return true, nil
			}
			got = true
			p.handle(p.buf[:n])
		case unix.EAGAIN:
			return got, nil
		case unix.EINTR:
		case unix.ENOBUFS:
			// The receive buffer overflowed: events were dropped. The
			// sequence gap that follows counts them; the interval falls
			// back to the sampling bound.
			p.markMissed()
			got = true
		default:
			return got, err
		}
	}
}

// fail stops using the events after an unexpected read error.
func (p *procEvents) fail(err error) {
	p.errMu.Lock()
	p.err = err
	p.errMu.Unlock()
	p.broken.Store(true)
}

func (p *procEvents) markMissed() {
	for _, ew := range p.workers {
		ew.missed = true
	}
}

// handle processes one datagram (one or more netlink messages). p.mu is held.
func (p *procEvents) handle(b []byte) {
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
		if what == procEventNone {
			continue
		}
		// Lost events: the kernel numbers the messages per CPU.
		seq, cpu := ne.Uint32(m[24:]), ne.Uint32(m[procEvOff+4:])
		if last, ok := p.lastSeq[cpu]; ok {
			if gap := seq - last - 1; gap > 0 && gap < 1<<31 {
				p.lost.Add(int64(gap))
				p.markMissed()
			}
		}
		p.lastSeq[cpu] = seq
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
			pe := p.owner[ptgid]
			if pe == nil {
				continue
			}
			ew := pe.w
			if ne.Uint64(m[procEvOff+8:]) < ew.since {
				// Forked before the worker was first seeded, read late: the
				// first scrape is the baseline, not a start.
				continue
			}
			if old := p.owner[ctgid]; old != nil {
				if old.w == ew && old.seen {
					// A scrape saw the child before its fork event was read
					// (the reader lags): the scrape counts it.
					continue
				}
				delete(old.w.pids, ctgid) // a missed exit
			}
			p.owner[ctgid] = &evEntry{w: ew, addedGen: ew.gen}
			ew.pids[ctgid] = struct{}{}
		case procEventExit:
			if len(d) < 8 {
				continue
			}
			pid, tgid := int32(ne.Uint32(d)), int32(ne.Uint32(d[4:]))
			if pid != tgid {
				continue // a thread (or a leader exiting before its threads: not the process's end)
			}
			e := p.owner[tgid]
			if e == nil {
				continue
			}
			delete(p.owner, tgid)
			delete(e.w.pids, tgid)
			if !e.seen && len(e.w.exits) < maxUnseenExits {
				e.w.exits = append(e.w.exits, evExit{pid: tgid, ns: ne.Uint64(m[procEvOff+8:])})
			}
		}
	}
}

// sync is called after a worker's walk: it marks the walked members seen
// (adding those the events did not know), drops members the walk no longer
// finds that were known before it began (they left the tree), and hands the
// exits of never-seen members to the scraper. It returns whether the
// interval since the previous sync was covered without loss (else the
// scraper falls back to its sampling bound) and appends the exits to out.
func (p *procEvents) sync(w *worker, out []evExit) ([]evExit, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The kernel queues an event on the socket when it happens, so draining
	// it now handles every fork and exit from before the walk: a reader
	// running late cannot put an event in the wrong interval (where the
	// walk, or the sampling bound after a loss, counted it already).
	if p.rc != nil && !p.broken.Load() {
		var derr error
		if err := p.rc.Control(func(fd uintptr) { _, derr = p.drain(int(fd)) }); err == nil && derr != nil {
			p.markMissed()
		}
	}
	ew := p.workers[w]
	if ew == nil {
		ew = &evWorker{pids: map[int32]struct{}{}, since: monotonicNs()}
		p.workers[w] = ew
	}
	missed := ew.missed
	covered := ew.armed && !missed && !p.broken.Load()
	out = append(out, ew.exits...)
	ew.exits = ew.exits[:0]
	ew.missed = false
	ew.armed = true
	for pid, m := range w.members {
		if m.gen != w.gen {
			continue
		}
		// Zombies too: seen (and counted) by the scrape, their fork and
		// exit events may not have been read yet (the reader lags).
		e := p.owner[pid]
		if e == nil || e.w != ew {
			if e != nil {
				delete(e.w.pids, pid)
			}
			e = &evEntry{w: ew, addedGen: ew.gen}
			p.owner[pid] = e
			ew.pids[pid] = struct{}{}
		}
		e.seen = true
		e.seenGen = ew.gen
	}
	for pid := range ew.pids {
		e := p.owner[pid]
		// After a loss the interval is counted by the sampling bound, which
		// may already include a child known only from its fork event (its
		// parent reaped it, its exit event not read yet): such a child must
		// not also be counted by its exit event in the next interval. It is
		// forgotten; the bound stays a lower bound.
		if (e.seenGen != ew.gen && e.addedGen != ew.gen) || (missed && !e.seen) {
			delete(ew.pids, pid)
			delete(p.owner, pid)
		}
	}
	ew.gen++
	return out, covered
}

// forget drops a worker that is no longer reported.
func (p *procEvents) forget(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ew := p.workers[w]
	if ew == nil {
		return
	}
	for pid := range ew.pids {
		delete(p.owner, pid)
	}
	delete(p.workers, w)
}

// bootOffsetNs is CLOCK_BOOTTIME - CLOCK_MONOTONIC (time suspended): the
// exit timestamps are monotonic, process start times count from boot.
func bootOffsetNs() uint64 {
	var b, m unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &b) != nil || unix.ClockGettime(unix.CLOCK_MONOTONIC, &m) != nil {
		return 0
	}
	return sat(uint64(b.Nano()), uint64(m.Nano()))
}

// monotonicNs is CLOCK_MONOTONIC, the clock of the events' timestamps.
func monotonicNs() uint64 {
	var t unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &t) != nil {
		return 0
	}
	return uint64(t.Nano())
}
