//go:build e2e

package e2e

// The suite touches only what it started (issue 14, point 9). Before any test
// runs, TestMain starts two bystanders that stand for what a developer runs
// on the same machine: another copy of the collector (the same binary, so a
// check that matched processes by executable path would take it for a
// leftover) and a Prometheus (which the old installer ended by name). They
// listen on their own ports. After the last test both must still be the same
// processes, alive and answering; otherwise the suite fails. Processes the
// tests started are counted by process group, session and descendants
// (family), never by name or path.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

// family is everything a process the suite started became: the process, its
// descendants (each with its start time, so a reused pid is not mistaken for
// it) and the process groups and sessions they lead or belong to (what a
// daemonizing child, reparented away from the tree, still carries).
type family struct {
	root    int
	members map[int]uint64 // pid -> start time
	groups  map[int32]bool // process group and session ids
}

// familyOf records root's family as it is now.
func familyOf(root int) family {
	f := family{root: root, members: map[int]uint64{}, groups: map[int32]bool{}}
	todo := []int{root}
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		st, err := procfs.StatOf(pid)
		if err != nil {
			continue
		}
		f.members[pid] = st.Starttime
		for _, g := range []int32{st.Pgrp, st.Session} {
			if g > 1 {
				f.groups[g] = true
			}
		}
		todo = append(todo, procfs.Children(pid)...)
	}
	// The suite's own group and session are not the family's.
	if st, err := procfs.StatOf(os.Getpid()); err == nil {
		delete(f.groups, st.Pgrp)
		delete(f.groups, st.Session)
	}
	return f
}

// left lists the family's processes still running: a recorded member with
// the same start time, or any process in one of its groups or sessions.
func (f family) left() string {
	var out []string
	for _, pid := range procfs.Pids() {
		st, err := procfs.StatOf(pid)
		if err != nil || st.Exited() {
			continue
		}
		if start, ok := f.members[pid]; (ok && start == st.Starttime) || f.groups[st.Pgrp] || f.groups[st.Session] {
			out = append(out, fmt.Sprintf("%d (group %d, session %d) %s", pid, st.Pgrp, st.Session, strings.Join(procfs.Cmdline(pid), " ")))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// bystander is a process of "the user's" that the suite must not touch.
type bystander struct {
	name  string
	cmd   *exec.Cmd
	start uint64 // its start time, to tell it from a new process on its pid
	ready string // a URL that answers 200 while it is healthy
	done  chan struct{}
}

// startBystanders starts another copy of the collector and a Prometheus on
// free ports, each in its own process group (as a user's would be), and
// waits until they answer. Missing binaries: none is started (the tests that
// need them skip, or fail in CI). WORKERWATCH_BYSTANDERS=0 turns them off.
func startBystanders() ([]*bystander, error) {
	if os.Getenv("WORKERWATCH_BYSTANDERS") == "0" {
		return nil, nil
	}
	dir, err := os.MkdirTemp("", "workerwatch-bystanders-")
	if err != nil {
		return nil, err
	}
	port := func() string {
		p, err := freeport.Pick()
		if err != nil {
			return "127.0.0.1:1"
		}
		return "127.0.0.1:" + strconv.Itoa(p)
	}
	var out []*bystander
	if col := filepath.Join(binDir, "otelcol-workerwatch"); fileExists(col) {
		health := port()
		b, err := startBystander("bystander-collector", "http://"+health+"/readyz",
			[]string{"WORKERWATCH_STATE_DIR=" + filepath.Join(dir, "state"), "WORKERWATCH_OTLP_ENDPOINT=http://" + port()},
			col, "--config", filepath.Join(repoRoot, "config.yaml"),
			"--set=extensions::worker_health::endpoint="+health,
			"--set=receivers::otlp::protocols::grpc::endpoint="+port(),
			"--set=receivers::otlp::protocols::http::endpoint="+port(),
			"--set=exporters::prometheus::endpoint="+port(),
			"--set=service::telemetry::metrics::level=none")
		if err != nil {
			return out, err
		}
		out = append(out, b)
	}
	if prom, err := exec.LookPath("prometheus"); err == nil {
		web := port()
		cfg := filepath.Join(dir, "prometheus.yml")
		if err := os.WriteFile(cfg, []byte("global:\n  scrape_interval: 15s\n"), 0o644); err != nil {
			return out, err
		}
		b, err := startBystander("bystander-prometheus", "http://"+web+"/-/ready", nil, prom,
			"--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "prom"), "--web.listen-address="+web)
		if err != nil {
			return out, err
		}
		out = append(out, b)
	}
	return out, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func startBystander(name, ready string, env []string, bin string, args ...string) (*bystander, error) {
	f, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	// Its own group (a user's process is in none of ours); killed with the
	// suite if the suite itself dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b := &bystander{name: name, cmd: cmd, ready: ready, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(b.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, err := getJSON(ready, nil); err == nil && code == 200 {
			break
		}
		select {
		case <-b.done:
			return b, fmt.Errorf("%s exited before it was ready (log %s)", name, f.Name())
		default:
		}
		if time.Now().After(deadline) {
			b.stop()
			return b, fmt.Errorf("%s not ready within 60s (log %s)", name, f.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, err := procfs.StatOf(cmd.Process.Pid); err == nil {
		b.start = st.Starttime
	}
	return b, nil
}

// untouched reports what is wrong with the bystander, if anything.
func (b *bystander) untouched() error {
	select {
	case <-b.done:
		return fmt.Errorf("%s (pid %d) is gone: %v", b.name, b.cmd.Process.Pid, b.cmd.ProcessState)
	default:
	}
	st, err := procfs.StatOf(b.cmd.Process.Pid)
	if err != nil || st.Starttime != b.start || st.State == 'T' {
		return fmt.Errorf("%s (pid %d) is not the process started (or is stopped): state %c, start %d (was %d) %v",
			b.name, b.cmd.Process.Pid, st.State, st.Starttime, b.start, err)
	}
	if code, err := getJSON(b.ready, nil); err != nil || code != 200 {
		return fmt.Errorf("%s (pid %d) does not answer %s: %d %v", b.name, b.cmd.Process.Pid, b.ready, code, err)
	}
	return nil
}

func (b *bystander) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

// withBystanders runs the suite between the bystanders' start and check.
func withBystanders(run func() int) int {
	bs, err := startBystanders()
	bystanders = bs
	defer func() {
		for _, b := range bs {
			b.stop()
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: bystanders:", err)
		return 1
	}
	for _, b := range bs {
		fmt.Printf("e2e: bystander %s pid=%d (a process of the user's: the suite must leave it alone)\n", b.name, b.cmd.Process.Pid)
	}
	code := run()
	for _, b := range bs {
		if err := b.untouched(); err != nil {
			fmt.Printf("FAIL e2e: the suite touched a process it did not start: %v\n", err)
			code = 1
		} else {
			fmt.Printf("e2e: bystander %s pid=%d still running and answering after the suite\n", b.name, b.cmd.Process.Pid)
		}
	}
	return code
}

// TestReliabilityInstallerLeavesOthersAlone runs scripts/install-test-deps.sh
// (what `make test` runs first) with everything installed: it must skip it
// all, quickly, and leave the bystanders (a Prometheus of the user's among
// them) running. The old script ended every prometheus process by name.
func TestReliabilityInstallerLeavesOthersAlone(t *testing.T) {
	// Independent of the other scenarios (own ports, directories, processes):
	// runs beside them (docs/e2e.md, "Time").
	defer parallel(t, 4*time.Second)()
	for _, tool := range []string{"prometheus", "promtool", "wrk", "chromium", "node", "npm"} {
		need(t, tool)
	}
	need(t, "jaeger", filepath.Join(cacheDir, "bin", "jaeger"))
	for _, lock := range mustGlob(t, filepath.Join(repoRoot, "examples", "*", "package-lock.json")) {
		if _, err := os.Stat(filepath.Join(filepath.Dir(lock), "node_modules")); err != nil {
			t.Skipf("%s not installed yet: the installer would install it", filepath.Dir(lock))
		}
	}
	before, err := bystanderCheck()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		cmd := exec.Command(filepath.Join(repoRoot, "scripts", "install-test-deps.sh"))
		cmd.Env = append(os.Environ(), "CACHE="+cacheDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("install-test-deps.sh (run %d): %v\n%s", i+1, err, out)
		}
		// Only the last line once everything is there: nothing installed again.
		if got := strings.TrimSpace(string(out)); got != "install-test-deps: ready" {
			t.Errorf("install-test-deps.sh (run %d) did more than skip what is installed:\n%s", i+1, out)
		}
	}
	if after, err := bystanderCheck(); err != nil || after != before {
		t.Errorf("after install-test-deps.sh: %v (before: %d bystanders running, after: %d)", err, before, after)
	}
}

// bystanders of this run of the suite, set by TestMain.
var bystanders []*bystander

func bystanderCheck() (int, error) {
	for _, b := range bystanders {
		if err := b.untouched(); err != nil {
			return 0, err
		}
	}
	return len(bystanders), nil
}

func mustGlob(t testing.TB, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
