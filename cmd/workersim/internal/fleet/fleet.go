//go:build linux

// Package fleet is `workersim fleet`: a supervisor that starts one
// scheduler and N workers as real processes (re-executing this binary),
// restarts a worker that asks for it, and exits only when every descendant
// is gone.
package fleet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/worker"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

// Config is the whole fleet.
type Config struct {
	Workers       int
	Faults        []cli.Fault
	IDPrefix      string
	PidDir        string
	SchedulerAddr string
	// SchedulerArgs and WorkerArgs are passed through to every scheduler
	// and worker (flags that are the same for all of them).
	SchedulerArgs []string
	WorkerArgs    []string
	// Endpoints are the OTLP endpoints, the workers' in turn (worker i gets
	// Endpoints[i % len]); empty: export disabled.
	Endpoints       []string
	ShutdownTimeout time.Duration
}

// proc is one supervised process.
type proc struct {
	kind     string // "scheduler" or "worker"
	id       string
	index    int // a worker's place in the fleet, from 0
	fault    cli.Fault
	restarts int
}

type exited struct {
	p   *proc
	pid int
	err error
}

// Fleet is the running supervisor.
type Fleet struct {
	cfg   Config
	exe   string
	addr  string // the scheduler's, host:port
	exits chan exited

	// mu orders starting a process against reaping strays, so the reaper
	// never waits for a pid that os/exec is about to wait for.
	mu   sync.Mutex
	live map[int]*proc
}

// New prepares a fleet; Start launches it.
func New(cfg Config, exe string) *Fleet {
	return &Fleet{cfg: cfg, exe: exe, exits: make(chan exited, 16), live: map[int]*proc{}}
}

// startScheduler binds the scheduler's socket here and hands it over as fd
// 3: the port is known before the workers start and nobody can take it in
// between.
func (f *Fleet) startScheduler() error {
	ln, err := net.Listen("tcp", f.cfg.SchedulerAddr)
	if err != nil {
		return fmt.Errorf("--scheduler-addr %s: %w", f.cfg.SchedulerAddr, err)
	}
	defer ln.Close()
	file, err := ln.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	defer file.Close()
	f.addr = ln.Addr().String()

	args := append([]string{"scheduler", "--listen-fd", "3"}, f.cfg.SchedulerArgs...)
	p := &proc{kind: "scheduler", id: "scheduler"}
	pid, err := f.start(p, args, nil, []*os.File{file})
	if err != nil {
		return err
	}
	cli.Logf("scheduler pid=%d addr=%s started", pid, f.addr)
	return nil
}

func (f *Fleet) workerArgs(p *proc) []string {
	// `workersim worker --id ID` leads the command line: the receiver's
	// selectors match on it.
	args := []string{"worker", "--id", p.id, "--scheduler", "http://" + f.addr, "--fault", string(p.fault)}
	endpoint := ""
	if n := len(f.cfg.Endpoints); n > 0 {
		endpoint = f.cfg.Endpoints[p.index%n]
	}
	args = append(args, "--otlp-endpoint", endpoint)
	return append(args, f.cfg.WorkerArgs...)
}

func (f *Fleet) startWorker(p *proc) error {
	env := []string{worker.EnvName + "=" + p.id}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, worker.EnvName+"=") {
			env = append(env, kv)
		}
	}
	pid, err := f.start(p, f.workerArgs(p), env, nil)
	if err != nil {
		return err
	}
	restart := ""
	if p.restarts > 0 {
		restart = fmt.Sprintf(" restart=%d", p.restarts)
	}
	cli.Logf("worker %s pid=%d fault=%s started%s", p.id, pid, p.fault, restart)
	if f.cfg.PidDir != "" {
		if err := writePidFile(f.pidFile(p.id), pid); err != nil {
			cli.Logf("worker %s: pid file: %v", p.id, err)
		}
	}
	return nil
}

func (f *Fleet) start(p *proc, args, env []string, files []*os.File) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cmd := exec.Command(f.exe, args...)
	cmd.Env = env // nil: inherit
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = files
	// If the supervisor dies without cleaning up, the kernel kills the
	// children: no orphaned fleet keeps running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s %s: %w", p.kind, p.id, err)
	}
	pid := cmd.Process.Pid
	f.live[pid] = p
	go func() { f.exits <- exited{p: p, pid: pid, err: cmd.Wait()} }()
	return pid, nil
}

func (f *Fleet) forget(pid int) {
	f.mu.Lock()
	delete(f.live, pid)
	f.mu.Unlock()
}

// signalAll sends sig to every live process of kind ("" = all).
func (f *Fleet) signalAll(kind string, sig syscall.Signal) (n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for pid, p := range f.live {
		if kind == "" || p.kind == kind {
			_ = syscall.Kill(pid, sig)
			n++
		}
	}
	return n
}

func (f *Fleet) count(kind string) (n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.live {
		if kind == "" || p.kind == kind {
			n++
		}
	}
	return n
}

// reapStrays waits for descendants that were re-parented to the fleet (it
// is a child subreaper) after their own parent died, e.g. the run children
// of a worker killed with SIGKILL: without this they would stay zombies.
func (f *Fleet) reapStrays() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pid := range procfs.Children(os.Getpid()) {
		if _, ours := f.live[pid]; ours {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}

// killStrays makes sure nothing is left when the fleet exits: every
// remaining descendant is killed and reaped.
func (f *Fleet) killStrays(within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		kids := procfs.Children(os.Getpid())
		if len(kids) == 0 {
			return
		}
		for _, pid := range kids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
}

func (f *Fleet) pidFile(id string) string { return filepath.Join(f.cfg.PidDir, id+".pid") }

// writePidFile replaces the file atomically: a reader never sees it empty.
func writePidFile(path string, pid int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// describe says how a process ended: "code=75" or "signal=killed".
func describe(err error) (string, int) {
	if err == nil {
		return "code=0", 0
	}
	ee := &exec.ExitError{}
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal=" + ws.Signal().String(), -1
		}
		return fmt.Sprintf("code=%d", ee.ExitCode()), ee.ExitCode()
	}
	return "error=" + strconv.Quote(err.Error()), -1
}
