//go:build linux

package fleet

import (
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
)

// Run starts the fleet and supervises it until a signal (or the scheduler's
// death) stops it; it returns the fleet's exit code.
func (f *Fleet) Run() int {
	// Become the reaper of our grandchildren, so "no orphans" can be
	// checked and enforced here rather than left to init.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		cli.Logf("fleet: warning: cannot become child subreaper: %v", err)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	code := cli.ExitOK
	stopping := false
	var deadline <-chan time.Time
	stop := func(sig syscall.Signal, why int) {
		if stopping {
			return
		}
		stopping, code = true, why
		deadline = time.After(f.cfg.ShutdownTimeout)
		// Workers first, so they can still hand their runs back to the
		// scheduler; the scheduler when the last worker is gone.
		if f.signalAll("worker", sig) == 0 {
			f.signalAll("scheduler", sig)
		}
	}

	if err := f.startScheduler(); err != nil {
		cli.Failf("fleet", "%v", err)
		return cli.ExitError
	}
	for i := 0; i < f.cfg.Workers; i++ {
		p := &proc{kind: "worker", id: f.workerID(i), index: i, fault: f.cfg.Faults[i]}
		if err := f.startWorker(p); err != nil {
			cli.Failf("fleet", "%v", err)
			stop(syscall.SIGTERM, cli.ExitError)
			break
		}
	}
	if !stopping {
		cli.Logf("fleet ready: %d workers, scheduler http://%s", f.cfg.Workers, f.addr)
	}

	reap := time.NewTicker(500 * time.Millisecond)
	defer reap.Stop()
	for f.count("") > 0 {
		select {
		case s := <-sigs:
			if stopping {
				cli.Logf("fleet: second signal, killing everything")
				f.signalAll("", syscall.SIGKILL)
				continue
			}
			cli.Logf("fleet: %v received, stopping", s)
			stop(s.(syscall.Signal), cli.ExitOK)
		case <-deadline:
			cli.Logf("fleet: shutdown timeout %s reached, killing what is left", f.cfg.ShutdownTimeout)
			f.signalAll("", syscall.SIGKILL)
			deadline = nil
		case e := <-f.exits:
			f.forget(e.pid)
			if f.handleExit(e, stopping) {
				stop(syscall.SIGTERM, cli.ExitError)
			}
			if stopping && f.count("worker") == 0 {
				f.signalAll("scheduler", syscall.SIGTERM)
			}
		case <-reap.C:
			f.reapStrays()
		}
	}
	f.killStrays(2 * time.Second)
	if f.cfg.PidDir != "" {
		for i := 0; i < f.cfg.Workers; i++ {
			_ = os.Remove(f.pidFile(f.workerID(i)))
		}
	}
	cli.Logf("fleet stopped")
	return code
}

func (f *Fleet) workerID(i int) string { return f.cfg.IDPrefix + strconv.Itoa(i+1) }

// handleExit logs a process's end and applies the restart rule: a worker
// that exits with ExitRestart is started again with the same id; anything
// else (a crash, SIGKILL) is left dead so it shows up as lost. It returns
// true when the whole fleet must stop (the scheduler died).
func (f *Fleet) handleExit(e exited, stopping bool) (fatal bool) {
	how, code := describe(e.err)
	switch {
	case e.p.kind == "scheduler":
		if stopping {
			cli.Logf("scheduler pid=%d exited %s", e.pid, how)
			return false
		}
		cli.Logf("scheduler pid=%d exited %s unexpectedly, stopping the fleet", e.pid, how)
		return true
	case stopping:
		cli.Logf("worker %s pid=%d exited %s", e.p.id, e.pid, how)
	case code == cli.ExitRestart:
		cli.Logf("worker %s pid=%d exited %s, restarting", e.p.id, e.pid, how)
		e.p.restarts++
		if err := f.startWorker(e.p); err != nil {
			cli.Logf("worker %s: restart failed: %v", e.p.id, err)
		}
	default:
		cli.Logf("worker %s pid=%d exited %s, not restarted", e.p.id, e.pid, how)
	}
	return false
}
