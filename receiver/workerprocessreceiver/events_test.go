//go:build linux

package workerprocessreceiver

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/procevents"
)

func TestProcessEventsConfig(t *testing.T) {
	cfg := realConfig()
	assert.Equal(t, "auto", cfg.ProcessEvents)
	for _, v := range []string{"auto", "netlink", "off"} {
		cfg.ProcessEvents = v
		require.NoError(t, cfg.Validate(), v)
	}
	cfg.ProcessEvents = "yes"
	require.ErrorContains(t, cfg.Validate(), `process_events: must be auto, netlink or off, got "yes"`)
}

// TestProcessEventsUnavailable: without the capability, auto logs once at
// info and falls back to sampling; netlink fails Start with what to grant.
func TestProcessEventsUnavailable(t *testing.T) {
	refused := func() (*procevents.Conn, error) {
		return nil, errors.New("joining the proc connector group: operation not permitted")
	}
	core, logs := observer.New(zapcore.DebugLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	cfg := realConfig()
	s, err := newWorkerScraper(set, cfg)
	require.NoError(t, err)
	s.openEvents = refused
	require.NoError(t, s.start(context.Background(), componenttest.NewNopHost()))
	assert.Nil(t, s.ev)
	for i := 0; i < 3; i++ {
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
	}
	require.NoError(t, s.shutdown(context.Background()))
	found := logs.FilterMessageSnippet("process events unavailable").All()
	require.Len(t, found, 1)
	assert.Equal(t, zapcore.InfoLevel, found[0].Level)
	assert.Empty(t, logs.Filter(func(e observer.LoggedEntry) bool { return e.Level >= zapcore.WarnLevel }).All())

	cfg = realConfig()
	cfg.ProcessEvents = "netlink"
	s2, err := newWorkerScraper(receivertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	s2.openEvents = refused
	err = s2.start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, "process_events: netlink")
	require.ErrorContains(t, err, "CAP_NET_ADMIN")
	require.NoError(t, s2.shutdown(context.Background()))

	// A fixture proc_root never uses the connector, even where the
	// subscription would succeed: auto is sampling, and netlink is refused.
	granted := func() (*procevents.Conn, error) { return &procevents.Conn{}, nil }
	cfg = fixtureConfig(copyFixture(t))
	cfg.ProcessEvents = "auto"
	s3, err := newWorkerScraper(receivertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	s3.openEvents = granted
	require.NoError(t, s3.start(context.Background(), componenttest.NewNopHost()))
	assert.Nil(t, s3.ev, "auto on a fixture proc_root")
	s3.ev = nil // the stub cannot be closed
	require.NoError(t, s3.shutdown(context.Background()))
	cfg.ProcessEvents = "netlink"
	s4, err := newWorkerScraper(receivertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	s4.openEvents = granted
	require.ErrorContains(t, s4.start(context.Background(), componenttest.NewNopHost()), "needs proc_root")
	require.NoError(t, s4.shutdown(context.Background()))
}

// startEventsScraper returns a scraper subscribed to the proc connector, or
// skips the test where the subscription fails (unless in CI).
func startEventsScraper(t *testing.T, cfg *Config) *workerScraper {
	t.Helper()
	if testing.Short() {
		t.Skip("spawns processes")
	}
	cfg.ProcessEvents = processEventsNetlink
	s, err := newWorkerScraper(receivertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	if err := s.start(context.Background(), componenttest.NewNopHost()); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("proc connector unavailable: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })
	return s
}

// TestProcessEventsExactCounts: a real tree forks 500 /bin/true children and
// 5 children with 3 /bin/true grandchildren each between two scrapes:
// started and exited grow by exactly the number of processes; the long-lived children keep their role, and
// one that exits is counted once, in its role. The same while other
// processes subscribe to the proc connector and leave it again all along (as
// other collectors and tests on a host do): the kernel's acknowledgements of
// their requests are no lost events (taken for gaps, they made the receiver
// fall back to its sampling bound and count almost none of the burst).
func TestProcessEventsExactCounts(t *testing.T) {
	t.Run("alone", func(t *testing.T) { exactCounts(t, "events1") })
	t.Run("while other listeners come and go", func(t *testing.T) {
		if testing.Short() {
			t.Skip("spawns processes")
		}
		stop := make(chan struct{})
		done := make(chan int)
		go func() {
			// About 50 times a second: every scrape interval sees some.
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			n := 0
			for {
				select {
				case <-stop:
					done <- n
					return
				case <-tick.C:
				}
				if c, err := procevents.Open(); err == nil {
					c.Close()
					n++
				}
			}
		}()
		n := -1
		t.Cleanup(func() {
			if n < 0 { // exactCounts stopped the test early
				close(stop)
				<-done
			}
		})
		exactCounts(t, "events2")
		close(stop)
		n = <-done
		t.Logf("another listener subscribed and left %d times meanwhile", n)
		require.Positive(t, n)
	})
}

func exactCounts(t *testing.T, id string) {
	s := startEventsScraper(t, realConfig())
	tr := startRealTree(t, id)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		_, err := s.scrape(ctx)
		require.NoError(t, err)
	}
	md, err := s.scrape(ctx)
	require.NoError(t, err)
	started0 := sumValues(md, id, "workerwatch.process.started", nil)
	exited0 := sumValues(md, id, "workerwatch.process.exited", nil)
	role := func(r string) map[string]string { return map[string]string{"workerwatch.process.role": r} }
	childStarted0 := sumValues(md, id, "workerwatch.process.started", role("child"))

	// Each spawner is a Go program: its first exec also forks the runtime's
	// pidfd probe (a child that exits at once, a process like any other),
	// so it makes 1 + k + 1 processes.
	const n, g, k = 500, 5, 3
	const total = n + g*(1+k+1)
	_, err = io.WriteString(tr.stdin, "burst 500 5 3\n")
	require.NoError(t, err)
	line, err := tr.out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)

	// The reader goroutine may still be behind the last exits: scrape until
	// the count is reached, then make sure it does not go beyond.
	var started, exited float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		md, err = s.scrape(ctx)
		require.NoError(t, err)
		started = sumValues(md, id, "workerwatch.process.started", nil) - started0
		exited = sumValues(md, id, "workerwatch.process.exited", nil) - exited0
		if started >= total && exited >= total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: started %v, exited %v of %d; events lost %d", started, exited, total, s.ev.Lost())
		}
	}
	time.Sleep(200 * time.Millisecond)
	md, err = s.scrape(ctx)
	require.NoError(t, err)
	started = sumValues(md, id, "workerwatch.process.started", nil) - started0
	exited = sumValues(md, id, "workerwatch.process.exited", nil) - exited0
	assert.Equal(t, float64(total), started)
	assert.Equal(t, float64(total), exited)
	v, _ := findValue(md, id, "workerwatch.process.count", role("engine-child"))
	assert.Equal(t, 3.0, v)
	v, _ = findValue(md, id, "workerwatch.process.count", role("child"))
	assert.Equal(t, 3.0, v)
	assert.Equal(t, float64(total), sumValues(md, id, "workerwatch.process.started", role("child"))-childStarted0)

	// A long-lived engine child (seen and classified by the scrapes) and its
	// grandchild exit: counted once each, in their own roles.
	engine0 := sumValues(md, id, "workerwatch.process.exited", role("engine-child"))
	tr.killChild(t, 0)
	require.Eventually(t, func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(tr.pids[1]))
		return os.IsNotExist(err)
	}, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < 2; i++ {
		md, err = s.scrape(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, engine0+1, sumValues(md, id, "workerwatch.process.exited", role("engine-child")))
	assert.Equal(t, float64(total)+2, sumValues(md, id, "workerwatch.process.exited", nil)-exited0)
	assert.Equal(t, float64(total), sumValues(md, id, "workerwatch.process.started", nil)-started0)
	assert.Zero(t, s.ev.Lost())
}

// Roots whose id template has no value are skipped and logged once per
// worker entry, however many there are.
func TestUnnamedRootsLoggedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	startRealTree(t, "unnamed1")
	startRealTree(t, "unnamed2")
	core, logs := observer.New(zapcore.DebugLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	cfg := realConfig()
	cfg.ProcessEvents = processEventsOff
	cfg.Workers[0].ID = "{env:WORKERWATCH_TEST_UNSET_VARIABLE}"
	cfg.Workers[0].Name = ""
	require.NoError(t, cfg.Validate())
	s, err := newWorkerScraper(set, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })
	for i := 0; i < 3; i++ {
		s.kinds[0].needScan = true // scan every time, as while nothing matches
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
	}
	assert.Len(t, logs.FilterMessageSnippet("id template has no value").All(), 1)
	assert.Empty(t, s.kinds[0].instances)
}
