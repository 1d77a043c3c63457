//go:build linux

package workerprocessreceiver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"golang.org/x/sys/unix"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

func cpuLimitOf(t *testing.T, md pmetric.Metrics, id string) float64 {
	t.Helper()
	v, ok := findValue(md, id, contract.MetricCPULimit, nil)
	require.True(t, ok, "no %s for %s", contract.MetricCPULimit, id)
	return v
}

// The CPU limit from a cgroup v2 cpu.max fixture (this host's v2 hierarchy
// has no controllers): the worker's affinity lowered to the tightest quota
// of its cgroup and their ancestors, read again at every scrape, and
// utilization as a fraction of it (internal/contract/cpu.go).
func TestCPULimitCgroupFixture(t *testing.T) {
	root := copyFixture(t)
	s := newTestScraper(t, fixtureConfig(root))
	clock := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return clock }
	require.NoError(t, s.start(context.Background(), nil))
	scrape := func() pmetric.Metrics {
		md, err := s.scrape(context.Background())
		require.NoError(t, err)
		clock = clock.Add(10 * time.Second)
		return md
	}
	cgDir := filepath.Join(root, "cgroup", "workers", "w2")

	// cg-w2's root (pid 300) may run on 1 CPU; its cgroup's cpu.max is
	// 50000/100000: half a CPU. w1 may run on 2 CPUs, with no quota.
	md := scrape()
	assert.InDelta(t, 0.5, cpuLimitOf(t, md, "cg-w2"), 1e-9)
	assert.InDelta(t, 2.0, cpuLimitOf(t, md, "w1"), 1e-9)

	// 300 uses 50 more ticks (0.5 s) in the 10 s interval: 0.05 of one CPU,
	// 0.1 of its half-CPU limit.
	writeStat(t, root, 300, "300 (python3) S 1 300 300 0 -1 4194560 100 0 0 0 940 110 0 0 20 0 1 0 7000 209715200 12800")
	md = scrape()
	util, ok := findValue(md, "cg-w2", contract.MetricCPUUtilization, map[string]string{contract.AttrRole: contract.RoleMain})
	require.True(t, ok)
	assert.InDelta(t, 0.1, util, 1e-9)

	// The quota is lifted (a resized pod): the affinity is the limit from
	// the next scrape on.
	require.NoError(t, os.WriteFile(filepath.Join(cgDir, "cpu.max"), []byte("max 100000\n"), 0o644))
	md = scrape()
	assert.InDelta(t, 1.0, cpuLimitOf(t, md, "cg-w2"), 1e-9)

	// A quota on an ancestor (a pod's limit above its container's cgroup)
	// applies too; the tightest level wins.
	require.NoError(t, os.WriteFile(filepath.Join(root, "cgroup", "workers", "cpu.max"), []byte("25000 100000\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(cgDir, "cpu.max"), []byte("80000 100000\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "cgroup", "user.slice", "cpu.max"), []byte("150000 100000\n"), 0o644))
	md = scrape()
	assert.InDelta(t, 0.25, cpuLimitOf(t, md, "cg-w2"), 1e-9)
	assert.InDelta(t, 1.5, cpuLimitOf(t, md, "w1"), 1e-9, "w1's root is in /user.slice/w1.scope, under user.slice's quota")

	// No affinity and no quota known: neither a limit nor a utilization.
	require.NoError(t, os.Remove(filepath.Join(root, "proc", "100", "status")))
	require.NoError(t, os.Remove(filepath.Join(root, "cgroup", "user.slice", "cpu.max")))
	md = scrape()
	_, ok = findValue(md, "w1", contract.MetricCPULimit, nil)
	assert.False(t, ok)
	assert.Empty(t, values(md, "w1", contract.MetricCPUUtilization, nil))
}

// TestCPULimitPinnedWorker: a real worker pinned with taskset to one CPU of
// this host, a single-threaded shell loop that burns what it gets of that
// CPU. Its limit is 1 and its utilization is exactly its CPU time over the
// interval (not half of it, as a division by the host's CPUs would give); on
// an idle host that is about 1. Widened to every CPU with taskset -p while it
// runs, the next scrape reads the new limit.
func TestCPULimitPinnedWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("taskset (util-linux) not installed")
	}
	cpus := len(cpuList(t))
	if cpus < 2 {
		t.Skip("needs at least 2 CPUs")
	}
	burner := exec.Command(taskset, "-c", "1", "sh", "-c", "while :; do :; done")
	burner.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, burner.Start())
	pid := burner.Process.Pid
	t.Cleanup(func() { _ = burner.Process.Kill(); _ = burner.Wait() })
	// taskset sets the affinity, then execs sh in the same process.
	require.Eventually(t, func() bool {
		st, err := procfs.StatOf(pid)
		return err == nil && st.CommString() == "sh"
	}, 10*time.Second, 5*time.Millisecond)

	pidFile := filepath.Join(t.TempDir(), "burner.pid")
	require.NoError(t, os.WriteFile(pidFile, []byte(strconv.Itoa(pid)), 0o644))
	cfg := createDefaultConfig().(*Config)
	cfg.ProcessEvents = processEventsOff
	cfg.Workers = []WorkerConfig{{ID: "burner", Selector: SelectorConfig{PIDFile: pidFile}}}
	s := newTestScraper(t, cfg)
	var clock time.Time
	s.now = func() time.Time { return clock }
	ticks := func() uint64 {
		st, err := procfs.StatOf(pid)
		require.NoError(t, err)
		return st.Utime + st.Stime
	}
	// One interval: the receiver's CPU time lies between what the process
	// had before the first scrape began and after the second ended.
	interval := func() (util, limit, lo, hi float64) {
		before0 := ticks()
		clock = time.Now()
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
		after0 := ticks()
		// Until the loop got at least 100 ticks (1 s) of CPU, whatever the
		// host's load: a condition, not a sleep.
		require.Eventually(t, func() bool { return ticks() >= after0+100 }, 2*time.Minute, 20*time.Millisecond)
		before1 := ticks()
		t1 := time.Now()
		elapsed := t1.Sub(clock).Seconds()
		clock = t1
		md, err := s.scrape(context.Background())
		require.NoError(t, err)
		after1 := ticks()
		u, ok := findValue(md, "burner", contract.MetricCPUUtilization, map[string]string{contract.AttrRole: contract.RoleMain})
		require.True(t, ok)
		return u, cpuLimitOf(t, md, "burner"),
			float64(before1-after0) / procfs.UserHZ / elapsed, float64(after1-before0) / procfs.UserHZ / elapsed
	}

	util, limit, lo, hi := interval()
	t.Logf("RESULT pinned to 1 of %d CPUs: limit %.2f, utilization %.3f (CPU time over the interval %.3f..%.3f)", cpus, limit, util, lo, hi)
	assert.InDelta(t, 1.0, limit, 1e-9)
	assert.GreaterOrEqual(t, util, lo-1e-9)
	assert.LessOrEqual(t, util, hi+1e-9)
	assert.LessOrEqual(t, util, 1.05, "a single thread on one CPU cannot use more than that CPU")

	// Widened while it runs: the limit follows at the next scrape.
	out, err := exec.Command(taskset, "-p", "-c", "0-"+strconv.Itoa(cpus-1), strconv.Itoa(pid)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	util, limit, lo, hi = interval()
	t.Logf("RESULT widened to %d CPUs: limit %.2f, utilization %.3f (CPU time over the interval %.3f..%.3f of one CPU)", cpus, limit, util, lo, hi)
	assert.InDelta(t, float64(cpus), limit, 1e-9)
	assert.GreaterOrEqual(t, util, lo/float64(cpus)-1e-9)
	assert.LessOrEqual(t, util, hi/float64(cpus)+1e-9)
}

// cpuList is the CPUs this process may run on.
func cpuList(t *testing.T) []int {
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	var out []int
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}
