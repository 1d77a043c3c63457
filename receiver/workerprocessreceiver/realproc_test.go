//go:build linux

package workerprocessreceiver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/procfs"
)

// The test binary doubles as the processes of a real worker tree: with
// WPR_HELPER set it becomes a root, child, grandchild or short-lived process
// (init runs before the generated TestMain).
func init() {
	mode := os.Getenv("WPR_HELPER")
	if mode == "" {
		return
	}
	runHelper(mode)
	os.Exit(0)
}

const (
	rootMiB  = 48
	childMiB = 24
	grandMiB = 8
)

// hold allocates and touches n MiB so it is resident.
func hold(n int) []byte {
	b := make([]byte, n<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}

func spawnHelper(mode string, args ...string) (*exec.Cmd, *bufio.Reader) {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), "WPR_HELPER="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		panic(err)
	}
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	return cmd, bufio.NewReader(out)
}

func runHelper(mode string) {
	switch mode {
	case "exit":
		return
	case "spawner":
		// WPR_K short-lived grandchildren, each reaped, then exit.
		k, _ := strconv.Atoi(os.Getenv("WPR_K"))
		for i := 0; i < k; i++ {
			_ = exec.Command("/bin/true").Run()
		}
		return
	case "grand":
		mem := hold(grandMiB)
		fmt.Println("ready", os.Getpid())
		time.Sleep(time.Hour)
		_ = mem[0]
	case "child":
		mem := hold(childMiB)
		g, r := spawnHelper("grand", "wprtest-grand")
		line, _ := r.ReadString('\n')
		fmt.Printf("ready %d %s", os.Getpid(), strings.TrimPrefix(line, "ready "))
		_ = g.Wait()
		_ = mem[0]
	case "root":
		mem := hold(rootMiB)
		var pids []string
		for i := 0; i < 3; i++ {
			c, r := spawnHelper("child", "wprtest-child")
			line, _ := r.ReadString('\n')
			pids = append(pids, strings.Fields(strings.TrimPrefix(line, "ready "))...)
			go func() { _ = c.Wait() }() // reap: the child's CPU moves into our cutime
		}
		fmt.Println("ready", os.Getpid(), strings.Join(pids, " "))
		// Each "short" line: fork a child that exits at once, and reap it.
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if f := strings.Fields(in.Text()); len(f) == 4 && f[0] == "burst" {
				// burst N G K: N /bin/true children, then G children that
				// each run K /bin/true grandchildren; all reaped.
				n, _ := strconv.Atoi(f[1])
				g, _ := strconv.Atoi(f[2])
				for i := 0; i < n; i++ {
					_ = exec.Command("/bin/true").Run()
				}
				for i := 0; i < g; i++ {
					c := exec.Command(os.Args[0], "-test.run=^$", "wprtest-spawner")
					c.Env = append(os.Environ(), "WPR_HELPER=spawner", "WPR_K="+f[3])
					_ = c.Run()
				}
				fmt.Println("done")
			}
			if f := strings.Fields(in.Text()); len(f) == 2 && f[0] == "exit" {
				code, _ := strconv.Atoi(f[1])
				os.Exit(code)
			}
			if in.Text() == "short" {
				c := exec.Command(os.Args[0], "-test.run=^$", "wprtest-short")
				c.Env = append(os.Environ(), "WPR_HELPER=exit")
				_ = c.Run()
				fmt.Println("done")
			}
		}
		_ = mem[0]
	}
}

type realTree struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	pids  []int // root, then child, grandchild pairs
}

func startRealTree(t *testing.T, id string) *realTree {
	t.Helper()
	return startTree(t, id, false)
}

// startTree starts a real worker tree; with group, in a process group of
// its own (the children inherit it) that killGroup kills at once.
func startTree(t *testing.T, id string, group bool) *realTree {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "wprtest-worker", "--id", id)
	cmd.Env = append(os.Environ(), "WPR_HELPER=root", "WORKER_NAME=name-"+id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: group}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	tr := &realTree{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() { tr.kill() })
	line, err := tr.out.ReadString('\n')
	require.NoError(t, err)
	for _, f := range strings.Fields(strings.TrimPrefix(line, "ready ")) {
		n, err := strconv.Atoi(f)
		require.NoError(t, err)
		tr.pids = append(tr.pids, n)
	}
	require.Len(t, tr.pids, 7)
	return tr
}

// killChild kills engine child i and its grandchild. The child waits for
// its grandchild and exits by itself once the grandchild is killed, so it
// may be gone before its own kill: that is no error.
func (tr *realTree) killChild(t *testing.T, i int) {
	t.Helper()
	for _, pid := range []int{tr.pids[2+2*i], tr.pids[1+2*i]} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
}

// killGroup kills the whole tree at once (SIGKILL to its process group) and
// waits until none of its processes is left (the root is reaped here, the
// others by init).
func (tr *realTree) killGroup(t *testing.T) {
	t.Helper()
	require.NoError(t, syscall.Kill(-tr.pids[0], syscall.SIGKILL))
	_ = tr.cmd.Wait()
	require.Eventually(t, func() bool {
		for _, p := range tr.pids {
			if procfs.Alive(p) {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)
}

func (tr *realTree) kill() {
	for _, p := range tr.pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	_ = tr.cmd.Wait()
}

// vmRSS reads VmRSS of /proc/<pid>/status: /proc's own figure.
func vmRSS(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	v, ok := procfs.FieldKB(b, "VmRSS:")
	require.True(t, ok)
	return float64(v)
}

func realConfig() *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.Workers = []WorkerConfig{{
		Selector: SelectorConfig{Cmdline: `wprtest-worker --id (?P<id>\S+)`},
		Name:     "{env:WORKER_NAME}",
		Roles:    []RoleConfig{{Name: "engine-child", Cmdline: `wprtest-child`}},
	}}
	return cfg
}

func TestRealTree(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	tr := startRealTree(t, "real1")
	s := newTestScraper(t, realConfig())
	ctx := context.Background()

	md, err := s.scrape(ctx)
	require.NoError(t, err)
	v, _ := findValue(md, "real1", "workerwatch.worker.present", nil)
	require.Equal(t, 1.0, v)
	count := func(role string) float64 {
		c, _ := findValue(md, "real1", "workerwatch.process.count", map[string]string{"workerwatch.process.role": role})
		return c
	}
	assert.Equal(t, 1.0, count("main"))
	assert.Equal(t, 3.0, count("engine-child"))
	assert.Equal(t, 3.0, count("child"))

	// RSS per role matches /proc's own VmRSS of the same processes (read
	// right after; allow 2% for pages touched in between) and holds at least
	// what each process allocated.
	byRole := map[string][]int{"main": {tr.pids[0]}}
	for i := 1; i < 7; i += 2 {
		byRole["engine-child"] = append(byRole["engine-child"], tr.pids[i])
		byRole["child"] = append(byRole["child"], tr.pids[i+1])
	}
	minMiB := map[string]float64{"main": rootMiB, "engine-child": 3 * childMiB, "child": 3 * grandMiB}
	for role, pids := range byRole {
		var want float64
		for _, p := range pids {
			want += vmRSS(t, p)
		}
		got, ok := findValue(md, "real1", "process.memory.usage", map[string]string{"workerwatch.process.role": role})
		require.True(t, ok, role)
		assert.InEpsilon(t, want, got, 0.02, role)
		assert.GreaterOrEqual(t, got, minMiB[role]*(1<<20), role)
	}

	total := func() map[string]float64 {
		out := map[string]float64{}
		for _, role := range []string{"main", "engine-child", "child"} {
			out[role] = sumValues(md, "real1", "process.cpu.time", map[string]string{"workerwatch.process.role": role})
		}
		return out
	}
	before := total()

	// Kill one engine child and its grandchild: CPU time stays monotonic per role.
	tr.killChild(t, 0)
	require.Eventually(t, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", tr.pids[1]))
		return os.IsNotExist(err)
	}, 5*time.Second, 10*time.Millisecond)
	md, err = s.scrape(ctx)
	require.NoError(t, err)
	after := total()
	for role, v := range before {
		assert.GreaterOrEqual(t, after[role], v, role)
	}
	assert.Equal(t, 2.0, count("engine-child"))
	exited := sumValues(md, "real1", "workerwatch.process.exited", nil)
	assert.GreaterOrEqual(t, exited, 1.0) // the engine child (its grandchild left the tree or exited)

	// A child that forks and exits between two scrapes is counted as started and exited.
	startedBefore := sumValues(md, "real1", "workerwatch.process.started", nil)
	exitedBefore := sumValues(md, "real1", "workerwatch.process.exited", nil)
	_, err = io.WriteString(tr.stdin, "short\n")
	require.NoError(t, err)
	line, err := tr.out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)
	md, err = s.scrape(ctx)
	require.NoError(t, err)
	assert.Equal(t, startedBefore+1, sumValues(md, "real1", "workerwatch.process.started", nil))
	assert.Equal(t, exitedBefore+1, sumValues(md, "real1", "workerwatch.process.exited", nil))
	before = total()

	// A restarted root is followed: same id, new pid, counters continue.
	oldRoot := tr.pids[0]
	tr.kill()
	tr2 := startRealTree(t, "real1")
	require.NotEqual(t, oldRoot, tr2.pids[0])
	md, err = s.scrape(ctx)
	require.NoError(t, err)
	v, _ = findValue(md, "real1", "workerwatch.worker.present", nil)
	assert.Equal(t, 1.0, v)
	assert.Equal(t, tr2.pids[0], int(s.kinds[0].instances["real1"].rootPid))
	after = total()
	for role, v := range before {
		assert.GreaterOrEqual(t, after[role], v, role)
	}
	assert.Equal(t, 3.0, count("engine-child"))

	// Gone for good: reported absent, not an error.
	tr2.kill()
	md, err = s.scrape(ctx)
	require.NoError(t, err)
	v, ok := findValue(md, "real1", "workerwatch.worker.present", nil)
	assert.True(t, ok)
	assert.Equal(t, 0.0, v)
}

// TestRootExitCountsItsTree: a tree killed as a group counts every member as
// exited, in its role, both when a new root replaces it in the same scrape
// and when the worker is then absent (the receiver keeps emitting its
// cumulative series while absent; it used to emit only present = 0).
func TestRootExitCountsItsTree(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, mode := range []string{processEventsOff, processEventsAuto} {
		t.Run("process_events="+mode, func(t *testing.T) {
			cfg := realConfig()
			cfg.ProcessEvents = mode
			s := newTestScraper(t, cfg)
			require.NoError(t, s.start(context.Background(), nil))
			id := "group-" + mode
			scrape := func() pmetric.Metrics {
				md, err := s.scrape(context.Background())
				require.NoError(t, err)
				return md
			}
			exited := func(md pmetric.Metrics) map[string]float64 {
				out := map[string]float64{}
				for _, role := range []string{"main", "engine-child", "child"} {
					v, ok := findValue(md, id, "workerwatch.process.exited", map[string]string{"workerwatch.process.role": role})
					require.True(t, ok, "exited of %s", role)
					out[role] = v
				}
				return out
			}
			// One root, three engine children, three grandchildren ("child").
			want := map[string]float64{"main": 1, "engine-child": 3, "child": 3}

			a := startTree(t, id, true)
			scrape()
			before := exited(scrape())

			// Replaced: A dies as a group and B starts before the next scrape.
			a.killGroup(t)
			b := startTree(t, id, true)
			md := scrape()
			v, _ := findValue(md, id, "workerwatch.worker.present", nil)
			require.Equal(t, 1.0, v)
			after := exited(md)
			for role, n := range want {
				assert.Equal(t, before[role]+n, after[role], "replaced: exited %s", role)
			}

			// Gone: B dies as a group, nothing replaces it.
			cpuBefore := sumValues(scrape(), id, "process.cpu.time", nil)
			b.killGroup(t)
			md = scrape()
			v, _ = findValue(md, id, "workerwatch.worker.present", nil)
			require.Equal(t, 0.0, v)
			gone := exited(md)
			for role, n := range want {
				assert.Equal(t, after[role]+n, gone[role], "gone: exited %s", role)
			}
			// Still emitted, unchanged, while absent.
			assert.Equal(t, gone, exited(scrape()))
			assert.Len(t, values(md, id, "process.cpu.time", nil), 2*3, "CPU time per role and mode")
			assert.GreaterOrEqual(t, sumValues(md, id, "process.cpu.time", nil), cpuBefore)
		})
	}
}
