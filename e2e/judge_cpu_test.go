//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

// TestJudgePinnedCPU: a worker pinned with taskset to one CPU of this host,
// its main process busy about two thirds of that CPU, is judged on that one
// CPU: its limit is 1, the cores the processor reports are the cores /proc
// shows it used (not those times the host's CPUs), and it is never
// cpu_saturated unless /proc shows it at its CPU. Before, the processor multiplied by the collector host's CPU
// count: on this 2-CPU host the reported cores were twice the real ones.
//
// Not parallel: it measures CPU, and the busy worker must get its share.
func TestJudgePinnedCPU(t *testing.T) {
	taskset := need(t, "taskset", "/usr/bin/taskset")
	j := startJudge(t, "judge-cpu", "cpu-", contract.ViewEvents)
	sim := need(t, "workersim", filepath.Join(binDir, "workersim"))
	pids := t.TempDir()
	start(t, j.name+"-fleet", nil, taskset, "-c", "0", sim, "fleet", "--workers", "1", "--faults", "busy",
		"--busy-fraction", "0.65", "--otlp-endpoint", j.otlp, "--id-prefix", j.prefix, "--scheduler-addr", j.schedAdr,
		"--pid-dir", pids, "--run-rate", "1", "--run-duration", "500ms", "--export-interval", "500ms")
	id := j.prefix + "1"
	e := env{pidDir: pids}

	var reported, fromProc []float64
	saturated := 0
	var lastSecs float64
	var lastAt time.Time
	eventually(t, 120*time.Second, time.Second, "30 judged CPU samples", func() error {
		w, err := j.worker(id)
		if err != nil {
			return err
		}
		if w.CPU.LimitCPUs != 1 {
			return fmt.Errorf("CPU limit %v, want 1 (taskset -c 0)", w.CPU.LimitCPUs)
		}
		// What /proc says the main process used since the last reading.
		pid := pidOfOrZero(e, id)
		st, err := procfs.StatOf(pid)
		if err != nil {
			return err
		}
		secs, now := st.CPUSeconds(), time.Now()
		if lastSecs > 0 {
			fromProc = append(fromProc, (secs-lastSecs)/now.Sub(lastAt).Seconds())
			if w.CPU.MainCores >= 0 {
				reported = append(reported, w.CPU.MainCores)
			}
		}
		lastSecs, lastAt = secs, now
		// cpu_saturated is false unless /proc too shows the main process
		// near its one CPU in the last samples (the rule needs 3 over 0.9):
		// the simulator's busy loop aims at 0.65 but has been seen at 0.98
		// of the CPU, which is then saturation, judged right. The old
		// definition reported twice the real cores on this 2-CPU host.
		if slices.Contains(reasonCodes(w), "cpu_saturated") {
			saturated++
			recent := fromProc[max(0, len(fromProc)-4):]
			if len(recent) == 0 || slices.Max(recent) < 0.8 {
				t.Fatalf("%s cpu_saturated at %.2f cores (limit %v) while /proc shows %.2f in its last samples: %+v",
					id, w.CPU.MainCores, w.CPU.LimitCPUs, recent, w.Reasons)
			}
		}
		if len(reported) < 30 {
			return fmt.Errorf("%d samples", len(reported))
		}
		return nil
	})
	slices.Sort(reported)
	slices.Sort(fromProc)
	medReported, medReal := reported[len(reported)/2], fromProc[len(fromProc)/2]
	if medReal < 0.05 {
		t.Fatalf("the busy worker got %.2f cores: nothing to judge", medReal)
	}
	if ratio := medReported / medReal; ratio < 0.7 || ratio > 1.4 {
		t.Errorf("reported %.2f cores for the main process, /proc shows %.2f (%.2fx): cores must be utilization x the worker's limit",
			medReported, medReal, ratio)
	}
	t.Logf("e2e: RESULT pinned CPU: %d samples, main process median %.2f cores reported, %.2f from /proc, limit 1 CPU (host has %d CPUs), %d samples cpu_saturated (with /proc at its CPU)",
		len(reported), medReported, medReal, hostCPUs(), saturated)
}

func hostCPUs() int {
	out, err := exec.Command("nproc", "--all").Output()
	if err != nil {
		return 0
	}
	var n int
	_, _ = fmt.Sscan(string(out), &n)
	return n
}

// TestJudgeCgroupCPUMax: the end-to-end verdict on cgroup v2 cpu.max limits
// (this host's cgroup v2 hierarchy has no controllers: a fixture /proc and
// cgroup tree, read by the real binary's receiver through proc_root and
// cgroup_root, whose CPU times the test advances as the worker's main
// process would use them). Three pods on a 16-CPU node:
//   - half: cpu.max 50000/100000 (half a CPU), main at 0.475 cores: at its
//     quota, cpu_saturated (saturation below one core is a share of the
//     limit: 0.9 x 0.5 = 0.45 cores);
//   - one: cpu.max 100000/100000 (one CPU), main at 0.5 cores: not saturated
//     (before, the processor multiplied by the host's CPUs: 1 core on this
//     2-CPU host, saturated; 8 cores on a 16-CPU one);
//   - wide: no quota, 16 CPUs, main at 1 core: saturated (before, 1/16 of
//     the CPUs times the host's 2 read as 0.125 cores).
func TestJudgeCgroupCPUMax(t *testing.T) {
	defer parallel(t, 12*time.Second)()
	root := t.TempDir()
	type pod struct {
		name  string
		pid   int
		quota string
		cores float64
	}
	pods := []pod{{"half", 500, "50000 100000", 0.475}, {"one", 510, "100000 100000", 0.5}, {"wide", 520, "max 100000", 1}}
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, content)
	}
	stat := func(p pod, ticks int64) string {
		// Fields of proc(5) stat; utime is field 14. RSS 2560 pages.
		return fmt.Sprintf("%d (node) S 1 %d %d 0 -1 4194560 100 0 0 0 %d 0 0 0 20 0 1 0 5000 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0\n",
			p.pid, p.pid, p.pid, ticks)
	}
	for _, p := range pods {
		d := filepath.Join(root, "proc", strconv.Itoa(p.pid))
		write(filepath.Join(d, "stat"), stat(p, 0))
		write(filepath.Join(d, "cmdline"), "node\x00worker.js\x00")
		write(filepath.Join(d, "environ"), "")
		write(filepath.Join(d, "cgroup"), "0::/pods/"+p.name+"\n")
		write(filepath.Join(d, "status"), "Name:\tnode\nCpus_allowed_list:\t0-15\n")
		write(filepath.Join(d, "task", strconv.Itoa(p.pid), "children"), "")
		if err := os.MkdirAll(filepath.Join(d, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		cg := filepath.Join(root, "cgroup", "pods", p.name)
		write(filepath.Join(cg, "cgroup.procs"), fmt.Sprintf("%d\n", p.pid))
		write(filepath.Join(cg, "cpu.max"), p.quota+"\n")
	}
	// The main processes use their cores: CPU time advanced from the wall
	// clock, rewritten atomically (a reader never sees half a file).
	began := time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			el := time.Since(began).Seconds()
			for _, p := range pods {
				f := filepath.Join(root, "proc", strconv.Itoa(p.pid), "stat")
				if err := os.WriteFile(f+".tmp", []byte(stat(p, int64(el*100*p.cores))), 0o644); err == nil {
					_ = os.Rename(f+".tmp", f)
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })

	fixture := filepath.Join(t.TempDir(), "fixture.yaml")
	writeFile(t, fixture, fmt.Sprintf(`receivers:
  worker_process:
    proc_root: %s
    cgroup_root: %s
    process_events: "off"
    collection_interval: 1s
    workers:
      - id: "pod-{cgroup}"
        selector:
          cgroup: "pods/*"
`, filepath.Join(root, "proc"), filepath.Join(root, "cgroup")))
	j := startJudge(t, "judge-cpumax", "unused-", contract.ViewEvents, fixture)

	want := map[string]struct {
		limit, cores float64
		saturated    bool
	}{"pod-half": {0.5, 0.475, true}, "pod-one": {1, 0.5, false}, "pod-wide": {16, 1, true}}
	seen := map[string]contract.Worker{}
	eventually(t, 60*time.Second, 500*time.Millisecond, "the three verdicts", func() error {
		for id, w := range want {
			got, err := j.worker(id)
			if err != nil {
				return err
			}
			sat := slices.Contains(reasonCodes(got), "cpu_saturated")
			if !w.saturated && sat {
				t.Fatalf("%s cpu_saturated at %.3f cores of a %v-CPU limit: %+v", id, got.CPU.MainCores, got.CPU.LimitCPUs, got.Reasons)
			}
			if got.CPU.LimitCPUs != w.limit {
				return fmt.Errorf("%s limit %v, want %v", id, got.CPU.LimitCPUs, w.limit)
			}
			if d := got.CPU.MainCores - w.cores; d > 0.05 || d < -0.05 {
				return fmt.Errorf("%s at %.3f cores, want %.3f", id, got.CPU.MainCores, w.cores)
			}
			if sat != w.saturated {
				return fmt.Errorf("%s saturated %v, want %v (%s %v)", id, sat, w.saturated, got.State, reasonCodes(got))
			}
			seen[id] = got
		}
		return nil
	})
	// "one" stays unsaturated for a while longer.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if got, err := j.worker("pod-one"); err == nil && slices.Contains(reasonCodes(got), "cpu_saturated") {
			t.Fatalf("pod-one cpu_saturated: %+v", got.Reasons)
		}
	}
	for _, id := range []string{"pod-half", "pod-one", "pod-wide"} {
		w := seen[id]
		thr := ""
		for _, r := range w.Reasons {
			if r.Code == "cpu_saturated" {
				thr = fmt.Sprintf(" (saturated from %.3f cores)", r.Threshold)
			}
		}
		t.Logf("e2e: RESULT cpu.max fixture: %s limit %v CPUs, main %.3f cores, %s%s", id, w.CPU.LimitCPUs, w.CPU.MainCores, w.State, thr)
	}
}
