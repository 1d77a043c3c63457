//go:build linux

package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

// The scraper: one scrape finds the workers (discovery.go), walks each
// worker's tree (walk.go) and emits one resource per worker (emit.go).

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/scraper/scrapererror"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/procfs"
	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/procevents"
)

type pidPair struct{ ppid, pid int32 }

type workerScraper struct {
	cfg    *Config
	logger *zap.Logger
	mb     *metadata.MetricsBuilder
	tel    *telemetry
	r      *procfs.Reader
	// files are the /proc files held open between scrapes (max_open_files).
	files *procfs.HeldFiles
	kinds []*workerKind
	now   func() time.Time

	wantFDs bool
	wantPSS bool
	wantTop bool
	// redact is non-nil only when top_processes_command_line is enabled:
	// command lines are then read for the top-N series, always redacted.
	redact *redactor

	// Scratch reused across scrapes so that steady state allocates nothing per process.
	stack    []int32
	tidBuf   []int32
	cgPids   []int32
	cgSet    map[int32]struct{}
	scanPPID map[int32]int32
	ppidIdx  []pidPair
	ppidOK   bool
	// noChildren is set once the kernel is known to lack the children
	// files (CONFIG_PROC_CHILDREN): every walk then uses the parent-pid index.
	noChildren bool
	logged     map[string]bool

	// ev is the proc connector subscription (nil: sampling only); evExits
	// and evWalked are scratch for ev.Sync; bootOff is CLOCK_BOOTTIME -
	// CLOCK_MONOTONIC at the scrape.
	ev *procevents.Conn
	// openEvents subscribes to the proc connector (procevents.Open; a
	// test replaces it to simulate a host where that fails, or succeeds).
	openEvents func() (*procevents.Conn, error)
	evExits    []procevents.Exit
	evWalked   []int32
	bootOff    uint64
	evLost     int64

	// boot is the host's boot time (procfs.Reader.BootTime), read once:
	// the roots' creation times are stated from it (zero: unknown, and
	// process.creation.time is left out).
	boot time.Time
	// mu serializes scrapes: the controller's, and the one a root's exit
	// triggers (exitScrapes).
	mu sync.Mutex
	// next is the receiver's consumer, for the scrape a root's exit
	// triggers (nil in tests that call scrape directly); stopExits ends
	// exitScrapes, exitsDone says it ended.
	next      consumer.Metrics
	stopExits context.CancelFunc
	exitsDone chan struct{}
	// exitUnreplaced: the last scrape found a root that exited within
	// exitFollowUp not replaced yet.
	exitUnreplaced atomic.Bool

	// Per-scrape counts for internal telemetry.
	read, vanished, perms, scans int64
	scanErr                      error
	scrapeTime                   time.Time
}

func newWorkerScraper(set receiver.Settings, cfg *Config) (*workerScraper, error) {
	// process.command_line is exported only through its own switch, which
	// also redacts it; Validate rejects enabling the attribute directly.
	mbc := cfg.MetricsBuilderConfig
	top := &mbc.Metrics.WorkerwatchProcessTopMemoryUsage
	top.EnabledAttributes = slices.DeleteFunc(slices.Clone(top.EnabledAttributes), func(k metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKey) bool {
		return k == metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKeyProcessCommandLine
	})
	var red *redactor
	if cfg.TopProcessesCommandLine.Enabled {
		var err error
		if red, err = newRedactor(cfg.TopProcessesCommandLine.Redact); err != nil {
			return nil, err
		}
		top.EnabledAttributes = append(top.EnabledAttributes, metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKeyProcessCommandLine)
	}
	r := procfs.NewReader(cfg.ProcRoot)
	s := &workerScraper{
		cfg:        cfg,
		logger:     set.Logger,
		redact:     red,
		mb:         metadata.NewMetricsBuilder(mbc, set),
		r:          r,
		files:      procfs.NewHeldFiles(r, cfg.MaxOpenFiles),
		now:        time.Now,
		openEvents: procevents.Open,
		cgSet:      map[int32]struct{}{},
		scanPPID:   map[int32]int32{},
		logged:     map[string]bool{},
		wantFDs:    cfg.Metrics.ProcessUnixFileDescriptorCount.Enabled,
		wantPSS:    cfg.Metrics.WorkerwatchProcessMemoryPss.Enabled,
		wantTop:    cfg.Metrics.WorkerwatchProcessTopMemoryUsage.Enabled && cfg.TopProcesses > 0,
	}
	for i, wc := range cfg.Workers {
		k, err := newWorkerKind(i, wc)
		if err != nil {
			return nil, err
		}
		k.files = s.files
		if id, name, ok := k.staticID(); ok {
			// A fixed id is expected to exist: report it absent until found.
			k.instances[id] = newWorker(k, id, name, s.now())
		}
		s.kinds = append(s.kinds, k)
	}
	if bt, err := r.BootTime(); err == nil {
		s.boot = bt
	} else {
		s.logger.Info("cannot read the host's boot time: the roots' process.creation.time is left out (their incarnation is the pid alone)", zap.Error(err))
	}
	tel, err := newTelemetry(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	s.tel = tel
	return s, nil
}

func (s *workerScraper) start(ctx context.Context, _ component.Host) error {
	if _, err := os.Stat(s.cfg.ProcRoot); err != nil {
		return fmt.Errorf("proc_root: %w", err)
	}
	if err := s.startEvents(); err != nil {
		return err
	}
	if s.ev != nil && s.next != nil {
		// The start context ends with Start: the goroutine keeps its values
		// only, and ends at shutdown.
		exitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		s.stopExits, s.exitsDone = cancel, make(chan struct{})
		go s.exitScrapes(exitCtx, s.ev.RootExited())
	}
	return nil
}

// exitScrapes scrapes at once when a worker's root exits (the proc
// connector's exit event), so that the exit is news within moments rather
// than at the next collection_interval: the scrape finds the root gone, looks
// for a restarted one, and states the exit on the worker's resource.
//
// A supervisor restarts a worker moments after its exit, usually after this
// scrape: when a root that just exited is still not replaced, one more scrape
// follows after exitFollowUp, so that the restart is seen before the health
// processor's lost.exit_grace rather than at the next collection_interval.
func (s *workerScraper) exitScrapes(ctx context.Context, exited <-chan struct{}) {
	defer close(s.exitsDone)
	var followUp <-chan time.Time
	for {
		byExit := true
		select {
		case <-ctx.Done():
			return
		case <-exited:
		case <-followUp:
			byExit = false
		}
		followUp = nil
		md, err := s.scrape(ctx)
		if byExit && s.exitUnreplaced.Load() {
			followUp = time.After(exitFollowUp)
		}
		if md.ResourceMetrics().Len() == 0 {
			continue
		}
		if err != nil && !scrapererror.IsPartialScrapeError(err) {
			continue
		}
		if err := s.next.ConsumeMetrics(ctx, md); err != nil {
			s.logger.Debug("the scrape after a root's exit was refused", zap.Error(err))
		}
	}
}

// startEvents subscribes to the proc connector per process_events. Only a
// real procfs is paired with it (its pids are the kernel's; a fixture
// directory's are not).
func (s *workerScraper) startEvents() error {
	mode := s.cfg.ProcessEvents
	if mode == processEventsOff || mode == "" {
		return nil
	}
	if !s.r.IsProcfs() {
		if mode == processEventsNetlink {
			return fmt.Errorf("process_events: netlink needs proc_root (%s) to be the host's procfs", s.cfg.ProcRoot)
		}
		return nil
	}
	p, err := s.openEvents()
	if err != nil {
		if mode == processEventsNetlink {
			return fmt.Errorf("process_events: netlink: cannot subscribe to the kernel's process events (%w); the collector needs CAP_NET_ADMIN in the host's initial user and pid namespaces (root, or the capability granted), or set process_events: auto or off", err)
		}
		s.logOnce("process_events", "process events unavailable: children shorter than collection_interval are counted as a lower bound (sampling); grant the collector CAP_NET_ADMIN in the host's namespaces (and run it in the host pid namespace) for exact started/exited counts",
			zap.Error(err))
		return nil
	}
	s.ev = p
	return nil
}

func (s *workerScraper) shutdown(context.Context) error {
	if s.stopExits != nil {
		s.stopExits()
		<-s.exitsDone
		s.stopExits = nil
	}
	if s.ev != nil {
		s.ev.Close()
		s.ev = nil
	}
	for _, k := range s.kinds {
		for _, w := range k.instances {
			for _, m := range w.members {
				s.files.Release(&m.files)
			}
		}
	}
	s.tel.shutdown()
	return nil
}

// scrape reads every worker's tree once and emits one resource per worker.
func (s *workerScraper) scrape(ctx context.Context) (pmetric.Metrics, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	began := time.Now()
	now := s.now()
	s.scrapeTime = now
	s.read, s.vanished, s.perms, s.scans, s.scanErr = 0, 0, 0, 0, nil
	s.ppidOK = false
	if s.ev != nil {
		s.bootOff = procevents.BootOffsetNs()
	}

	s.discover(now, false)
	rescan := false
	for _, k := range s.kinds {
		for _, w := range k.instances {
			if w.rootPid == 0 {
				continue
			}
			if !s.walk(w) {
				// The root exited: find where the worker went (a restart)
				// in this same scrape, so that it is not reported absent.
				s.rootGone(w, now)
				if k.sel == selMatch {
					k.needScan = true
				}
				rescan = true
			}
		}
	}
	if rescan {
		s.discover(now, true)
		for _, k := range s.kinds {
			for _, w := range k.instances {
				if w.rootPid != 0 && !w.walkedAt(now) {
					if !s.walk(w) {
						s.rootGone(w, now)
					}
				}
			}
		}
	}

	unreplaced := false
	for _, k := range s.kinds {
		for id, w := range k.instances {
			if w.rootPid == 0 && w.ended.pid != 0 {
				since := now.Sub(w.ended.at)
				unreplaced = unreplaced || since < exitFollowUp
				if since < exitRescanFor && k.sel == selMatch {
					// Look for its restart at every scrape for a while, not
					// only every discovery_interval.
					k.needScan = true
				}
			}
			if w.rootPid == 0 {
				s.settleAbsent(w)
				if w.absentSince.IsZero() {
					w.absentSince = now
				}
				if !k.idT.isStatic() && now.Sub(w.absentSince) > s.cfg.ForgetAfter {
					delete(k.instances, id)
					if s.ev != nil && w.evg != nil {
						s.ev.Forget(w.evg)
					}
					continue
				}
			} else {
				w.absentSince = time.Time{}
			}
			s.emit(w, now)
		}
	}

	s.exitUnreplaced.Store(unreplaced)
	if s.ev != nil {
		lost := s.ev.Lost()
		s.tel.recordEventsLost(ctx, lost-s.evLost)
		s.evLost = lost
		if err := s.ev.Err(); err != nil {
			s.logOnce("process_events_broken", "reading process events failed; counting children shorter than collection_interval as a lower bound (sampling) from now on", zap.Error(err))
		}
	}
	s.tel.record(ctx, time.Since(began), s.read, s.vanished, s.perms, s.scans, s.files.Open())
	if s.scanErr != nil {
		return s.mb.Emit(), scrapererror.NewPartialScrapeError(fmt.Errorf("scanning %s: %w", s.cfg.ProcRoot, s.scanErr), 0)
	}
	return s.mb.Emit(), nil
}

// walkedAt reports whether the worker was walked in this scrape (the second
// pass after a rescan only walks the workers that got a new root).
func (w *worker) walkedAt(now time.Time) bool { return w.lastWalk.Equal(now) }

// settleAbsent moves every member of a worker whose root is gone out of
// its tree: each counts as exited in its role (the children killed with the
// root too), and its CPU stays in the accumulators (so a restart continues
// them). With process events, the members that forked and exited since the
// last walk without a walk seeing them are counted too.
func (s *workerScraper) settleAbsent(w *worker) {
	if len(w.members) == 0 {
		return
	}
	w.gen++
	w.sweep()
	w.finish()
	w.hasPrev = false
	if s.ev != nil && w.evg != nil && s.syncEvents(w) && w.initialized {
		s.countUnseen(w)
	}
}

// exitFollowUp is how long after a root's exit the receiver scrapes again
// when no new root replaced it (exitScrapes): a supervisor's restart takes
// about this long or less; the health processor's default lost.exit_grace
// (2 s) is longer.
const exitFollowUp = time.Second

// exitRescanFor is how long after a root's exit, with no new root found,
// the receiver scans for the worker's process at every scrape (a match
// selector; otherwise every discovery_interval): a supervisor restarting
// with a backoff is found at once. One /proc scan per scrape meanwhile.
const exitRescanFor = 30 * time.Second

// rootGone records that the worker's root ended (its walk or the discovery
// found it gone): its incarnation, when and how, from the kernel's exit
// event where the proc connector saw it, else unknown at the scrape's time.
func (s *workerScraper) rootGone(w *worker, now time.Time) {
	end := rootEnd{pid: w.rootPid, start: w.rootStart, created: w.created, at: now}
	if s.ev != nil && w.evg != nil {
		if e, ok := s.ev.RootExit(w.evg, w.rootPid); ok {
			end.exit = e
			if mono := procevents.MonotonicNs(); mono >= e.Ns {
				end.at = time.Now().Add(-time.Duration(mono - e.Ns))
			}
		}
		s.ev.SetRoot(w.evg, 0)
	}
	end.exited = formatTime(end.at)
	w.ended = end
	w.rootPid, w.rootStart, w.created = 0, 0, ""
}
