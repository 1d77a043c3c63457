//go:build linux

package workerprocessreceiver

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtureConfig watches the three fixture workers: w1 by command line, cg-w2
// by cgroup, and "ghost" by a pid file that does not exist.
func fixtureConfig(root string) *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.ProcRoot = filepath.Join(root, "proc")
	cfg.CgroupRoot = filepath.Join(root, "cgroup")
	cfg.Metrics.WorkerwatchProcessTopMemoryUsage.Enabled = true
	cfg.TopProcesses = 2
	cfg.Workers = []WorkerConfig{
		{
			Selector: SelectorConfig{Cmdline: `workersim worker --id (?P<id>\S+)`},
			Name:     "{env:WORKER_NAME}",
			Roles:    []RoleConfig{{Name: "run", Cmdline: `workersim run-child`}},
		},
		{ID: "cg-{cgroup}", Selector: SelectorConfig{Cgroup: "workers/*"}},
		{ID: "ghost", Selector: SelectorConfig{PIDFile: filepath.Join(root, "ghost.pid")}},
	}
	return cfg
}

func copyFixture(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS(filepath.Join("testdata", "fixture"))))
	return dst
}

func writeStat(t *testing.T, root string, pid int, line string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc", strconv.Itoa(pid), "stat"), []byte(line+"\n"), 0o644))
}

func TestFixtureScrapes(t *testing.T) {
	root := copyFixture(t)
	s := newTestScraper(t, fixtureConfig(root))
	clock := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return clock }
	require.NoError(t, s.start(context.Background(), nil))

	md, err := s.scrape(context.Background())
	require.NoError(t, err)
	compareGolden(t, "fixture_scrape1", md)
	// The vanished child 104 is counted, never an error.
	assert.Equal(t, int64(1), s.vanished)

	// Between the scrapes: run child 101 exits and is reaped by the root (the
	// root's cutime/cstime grow by its final total, a little more than its
	// last reading); its child 107 is re-parented to init and leaves the
	// tree; pid 105 is reused by a new run child; 110 reaped short-lived
	// children never seen (its cminflt grew); the root used 1s more CPU.
	require.NoError(t, os.RemoveAll(filepath.Join(root, "proc", "101")))
	writeStat(t, root, 107, "107 (sh) S 1 107 107 0 -1 4194560 100 0 0 0 2 2 0 0 20 0 1 0 5300 3276800 200")
	writeStat(t, root, 100, "100 (workersim) S 1 100 100 0 -1 4194560 100 70 0 0 380 120 55 12 20 0 1 0 5000 41943040 2560")
	writeStat(t, root, 105, "105 (workersim) S 100 105 105 0 -1 4194560 100 0 0 0 3 1 0 0 20 0 1 0 5900 81920 1000")
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc", "105", "cmdline"), []byte("/usr/bin/workersim\x00run-child\x00--run-id\x00r2\x00"), 0o644))
	writeStat(t, root, 110, "110 (worker-helper) S 100 110 110 0 -1 4194560 100 40 0 0 4 1 3 1 20 0 1 0 5400 4915200 300")
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc", "100", "task", "100", "children"), []byte("102 105 110 "), 0o644))
	clock = clock.Add(10 * time.Second)

	md, err = s.scrape(context.Background())
	require.NoError(t, err)
	compareGolden(t, "fixture_scrape2", md)

	// Whole-tree CPU only grows: 101's last reading stays in "run", the root's
	// cutime growth beyond it (the tail) lands in "main", 110's unseen
	// children's CPU (its cutime) in "child".
	user := sumValues(md, "w1", "process.cpu.time", map[string]string{"cpu.mode": "user"})
	// Scrape 2 user ticks: the root 380 + cutime 55, of which 50 (101's last
	// reading) and 1 (the old 105's) are already counted in their own roles,
	// so 4 are the tail; 101 kept 50; 105 old 1 kept + new 3; 107 kept 2 and
	// 108 kept 20 (they left the tree with 107); 110 4 + cutime 3; zombie 7.
	assert.InDelta(t, (380.0+55-51+50+1+3+2+20+4+3+7)/100, user, 1e-9)
	runUser, _ := findValue(md, "w1", "process.cpu.time", map[string]string{"cpu.mode": "user", "workerwatch.process.role": "run"})
	assert.InDelta(t, (50.0+3)/100, runUser, 1e-9)
	mainUser, _ := findValue(md, "w1", "process.cpu.time", map[string]string{"cpu.mode": "user", "workerwatch.process.role": "main"})
	assert.InDelta(t, (380.0+4)/100, mainUser, 1e-9)
}
