//go:build linux

package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

// fleetProc is a `workersim fleet` started by a test: its stderr lines, and
// every descendant pid seen while it ran (for the no-orphans check).
type fleetProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu    sync.Mutex
	lines []string
	seen  map[int]string // pid -> command line
}

func startFleet(t *testing.T, args ...string) *fleetProc {
	t.Helper()
	f := &fleetProc{done: make(chan struct{}), seen: map[int]string{}}
	f.cmd = exec.Command(bin, append([]string{"fleet"}, args...)...)
	// If the test binary dies, the fleet dies (and its children with it).
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := f.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, f.cmd.Start())
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			f.mu.Unlock()
		}
	}()
	go func() {
		<-readDone
		f.err = f.cmd.Wait()
		close(f.done)
	}()
	go f.watchTree()
	t.Cleanup(func() {
		select {
		case <-f.done:
		default:
			_ = f.cmd.Process.Kill()
			<-f.done
		}
		if t.Failed() {
			t.Logf("fleet stderr:\n%s", strings.Join(f.Lines(), "\n"))
		}
	})
	return f
}

// watchTree records every descendant of the fleet every 50 ms.
func (f *fleetProc) watchTree() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-t.C:
		}
		stack := []int{f.cmd.Process.Pid}
		for len(stack) > 0 {
			pid := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, c := range procfs.Children(pid) {
				cl := strings.Join(procfs.Cmdline(c), " ")
				f.mu.Lock()
				if _, ok := f.seen[c]; !ok || f.seen[c] == "" {
					f.seen[c] = cl
				}
				f.mu.Unlock()
				stack = append(stack, c)
			}
		}
	}
}

func (f *fleetProc) Lines() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lines...)
}

func (f *fleetProc) Seen() map[int]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[int]string, len(f.seen))
	for k, v := range f.seen {
		out[k] = v
	}
	return out
}

// waitLine waits for a stderr line matching re.
func (f *fleetProc) waitLine(t *testing.T, re *regexp.Regexp, within time.Duration) {
	t.Helper()
	require.Eventuallyf(t, func() bool {
		for _, l := range f.Lines() {
			if re.MatchString(l) {
				return true
			}
		}
		return false
	}, within, 50*time.Millisecond, "no stderr line matching %s", re)
}

var startRe = regexp.MustCompile(`^workersim: worker (\S+) pid=(\d+) fault=(\S+) started`)

// starts returns the pids a worker id was started with, in order.
func (f *fleetProc) starts(id string) []int {
	var pids []int
	for _, l := range f.Lines() {
		if m := startRe.FindStringSubmatch(l); m != nil && m[1] == id {
			pid, _ := strconv.Atoi(m[2])
			pids = append(pids, pid)
		}
	}
	return pids
}

func (f *fleetProc) workerPid(t *testing.T, id string) int {
	t.Helper()
	var pid int
	require.Eventuallyf(t, func() bool {
		p := f.starts(id)
		if len(p) == 0 {
			return false
		}
		pid = p[len(p)-1]
		return true
	}, 10*time.Second, 20*time.Millisecond, "worker %s never started", id)
	return pid
}

// runChild waits for a run-child of pid and returns its pid and argv. On
// failure it adds explain's answer (nil: nothing), read then.
func runChild(t *testing.T, parent int, within time.Duration, explain func() any) (int, []string) {
	t.Helper()
	var pid int
	var argv []string
	if !assert.Eventually(t, func() bool {
		pid, argv = firstRunChild(parent)
		return pid != 0 && procfs.Alive(pid)
	}, within, 10*time.Millisecond) {
		var why any
		if explain != nil {
			why = explain()
		}
		t.Fatalf("no run-child under pid %d %v", parent, why)
	}
	return pid, argv
}

// flagValue returns the value after --name in argv.
func flagValue(argv []string, name string) string {
	for i, a := range argv {
		if a == name && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

type sinks struct {
	traces  *consumertest.TracesSink
	metrics *consumertest.MetricsSink
	logs    *consumertest.LogsSink
}

// startOTLP runs the collector's real OTLP receiver (HTTP only) on a free
// loopback port, feeding in-memory sinks; it returns host:port.
func startOTLP(t *testing.T) (string, *sinks) {
	t.Helper()
	endpoint := freeport.Addr(t)

	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = endpoint

	s := &sinks{new(consumertest.TracesSink), new(consumertest.MetricsSink), new(consumertest.LogsSink)}
	set := receivertest.NewNopSettings(f.Type())
	ctx := context.Background()
	tr, err := f.CreateTraces(ctx, set, cfg, s.traces)
	require.NoError(t, err)
	mr, err := f.CreateMetrics(ctx, set, cfg, s.metrics)
	require.NoError(t, err)
	lr, err := f.CreateLogs(ctx, set, cfg, s.logs)
	require.NoError(t, err)
	host := componenttest.NewNopHost()
	require.NoError(t, tr.Start(ctx, host))
	require.NoError(t, mr.Start(ctx, host))
	require.NoError(t, lr.Start(ctx, host))
	t.Cleanup(func() {
		_ = tr.Shutdown(ctx)
		_ = mr.Shutdown(ctx)
		_ = lr.Shutdown(ctx)
	})
	return endpoint, s
}

// alive reports whether pid still exists (zombies count as gone).
func alive(pid int) bool { return procfs.Alive(pid) }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
