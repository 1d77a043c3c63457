//go:build linux

package worker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/trace"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/api"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
	"github.com/workerwatch/workerwatch/cmd/workersim/internal/telemetry"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

// Kill reasons (workerwatch.kill.reason).
const (
	reasonTimeout  = "timeout"
	reasonMemory   = "memory_limit"
	reasonShutdown = "shutdown"
)

// outcome is how a run ended.
type outcome struct {
	result    string // cicd.pipeline.result
	errorType string // error.type, empty on success
	kill      string // workerwatch.kill.reason, empty when not killed
}

// memoryPoll is how often the worker reads a child's RSS: the OpenFn engine
// and Scoot sample at this order of magnitude.
const memoryPoll = 100 * time.Millisecond

// killGrace is how long a child may take to die after SIGTERM.
const killGrace = 2 * time.Second

// schedulerCallTimeout bounds one call to the scheduler, so a shutdown is
// not held up by a scheduler that is already gone.
const schedulerCallTimeout = 2 * time.Second

// execute takes one claimed run through ack, span, child process and report.
// ctx ends when the worker shuts down.
func (w *Worker) execute(ctx context.Context, run api.Run) {
	defer w.wg.Done()
	defer w.forget(run.ID)
	bg := context.WithoutCancel(ctx)
	d := &w.cfg.Dialect
	runAttr := attribute.String(d.RunKey, run.ID)

	if w.cfg.Fault == cli.FaultOrphan {
		// Acknowledge too late: by then the scheduler has rolled the claim
		// back, and the run is executed anyway (duplicate execution risk).
		select {
		case <-time.After(w.cfg.AckDelay):
		case <-ctx.Done():
			w.release(bg, run.ID, reasonShutdown)
			return
		}
	}
	if err := w.call(bg, func(c context.Context) error { return w.client.Start(c, w.cfg.ID, run.ID) }); err != nil {
		switch {
		case errors.Is(err, api.ErrNotHeld) && w.cfg.Fault != cli.FaultOrphan:
			// A healthy worker gives up a run the scheduler took back.
			w.emitRelease(bg, run.ID, "rolled_back")
			return
		case !errors.Is(err, api.ErrNotHeld):
			w.warn.Printf("start %s: %v (running it anyway)", run.ID, err)
		}
	}

	rctx, span := w.tel.Tracer.Start(bg, contract.SpanRun, trace.WithAttributes(runAttr,
		attribute.String(d.IDKey, w.cfg.ID)))
	w.tel.Emit(rctx, log.SeverityInfo, d.Started, "run "+run.ID+" started", runAttr)

	if d.StageSpans[0] != "" {
		_, compile := w.tel.Tracer.Start(rctx, d.StageSpans[0])
		time.Sleep(w.jitter(10*time.Millisecond, 50*time.Millisecond))
		compile.End()
	}

	_, exe := w.tel.Tracer.Start(rctx, d.StageSpans[1])
	if d.StepStart != "" {
		w.tel.Emit(rctx, log.SeverityInfo, d.StepStart, "run "+run.ID+" step started", runAttr)
	}
	out := w.runChild(ctx, run)
	endSpan(exe, out, d)
	if d.StepComplete != "" {
		w.tel.Emit(rctx, log.SeverityInfo, d.StepComplete, "run "+run.ID+" step complete", runAttr)
	}

	result := d.Result(out.result, out.kill != "")
	span.SetAttributes(attribute.String(d.ResultKey, result))
	endSpan(span, out, d)

	attrs := []attribute.KeyValue{runAttr, attribute.String(d.ResultKey, result)}
	if out.errorType != "" {
		attrs = append(attrs, attribute.String(d.ErrorKey, out.errorType))
	}
	if out.kill != "" {
		// killed also counts as finished (docs/conventions.md): one event.
		if d.KillReasonKey != "" {
			attrs = append(attrs, attribute.String(d.KillReasonKey, out.kill))
		}
		w.tel.Emit(rctx, log.SeverityWarn, d.Killed, "run "+run.ID+" killed: "+out.kill, attrs...)
	} else {
		w.tel.Emit(rctx, log.SeverityInfo, d.Finished, "run "+run.ID+" finished: "+out.result, attrs...)
	}

	if out.kill == reasonShutdown {
		// Not the run's fault: hand it back so another worker runs it.
		_ = w.call(bg, func(c context.Context) error { return w.client.Release(c, w.cfg.ID, run.ID) })
		return
	}
	// An orphan's completion is refused (409): the scheduler no longer
	// lists the run for this worker. Nothing more to do either way.
	_ = w.call(bg, func(c context.Context) error {
		return w.client.Complete(c, w.cfg.ID, run.ID, out.result, out.errorType)
	})
	if w.cfg.Fault == cli.FaultLeak {
		w.leak()
	}
}

// release hands back a run that never started.
func (w *Worker) release(ctx context.Context, runID, why string) {
	w.emitRelease(ctx, runID, why)
	_ = w.call(ctx, func(c context.Context) error { return w.client.Release(c, w.cfg.ID, runID) })
}

// emitRelease reports that the worker gave a run up without running it: a
// release, or in a dialect without one (OpenFn) a run:complete that says
// cancel.
func (w *Worker) emitRelease(ctx context.Context, runID, why string) {
	d := &w.cfg.Dialect
	attrs := []attribute.KeyValue{attribute.String(d.RunKey, runID), attribute.String(contract.AttrReleaseReason, why)}
	if d.Released == d.Finished {
		attrs = append(attrs, attribute.String(d.ResultKey, d.Result(contract.ResultCancellation, false)))
	}
	w.tel.Emit(ctx, log.SeverityInfo, d.Released, "run "+runID+" released: "+why, attrs...)
}

func (w *Worker) call(ctx context.Context, f func(context.Context) error) error {
	c, cancel := context.WithTimeout(ctx, schedulerCallTimeout)
	defer cancel()
	return f(c)
}

func endSpan(s trace.Span, out outcome, d *telemetry.Dialect) {
	if out.errorType != "" {
		s.SetAttributes(attribute.String(d.ErrorKey, out.errorType))
		s.SetStatus(codes.Error, out.errorType)
	}
	s.End()
}

// childSpec is what the run's child is asked to do; the timeout and oom
// faults make it outgrow the worker's limits.
func (w *Worker) childSpec(run api.Run) (memory int64, d time.Duration) {
	memory, d = run.MemoryBytes, run.Duration()
	switch w.cfg.Fault {
	case cli.FaultTimeout:
		d = 3*w.cfg.RunTimeout + d
	case cli.FaultOOM:
		memory = 2*w.cfg.RunMemoryLimit + memory
	}
	return memory, d
}

// runChild forks `workersim run-child` and watches it until it exits: it is
// killed with SIGTERM when it outlives RunTimeout (then SIGKILL after a
// grace), with SIGKILL when its RSS exceeds RunMemoryLimit or when the
// worker shuts down.
func (w *Worker) runChild(ctx context.Context, run api.Run) outcome {
	mem, d := w.childSpec(run)
	cmd := exec.Command(w.cfg.Exe, "run-child", "--run-id", run.ID,
		"--memory", strconv.FormatInt(mem, 10), "--duration", d.String())
	// Like OpenFn's forked children: an empty environment (no WORKER_NAME),
	// so only the command line and the parent identify a run's process.
	cmd.Env = []string{}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		w.warn.Printf("run %s: start child: %v", run.ID, err)
		return outcome{result: "error", errorType: "SpawnError"}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	timeout := time.NewTimer(w.cfg.RunTimeout)
	defer timeout.Stop()
	poll := time.NewTicker(memoryPoll)
	defer poll.Stop()
	var (
		reason string
		grace  <-chan time.Time
		stop   = ctx.Done()
	)
	kill := func(why string, sig syscall.Signal) {
		if reason == "" {
			reason = why
		}
		_ = cmd.Process.Signal(sig)
	}
	for {
		select {
		case err := <-done:
			return classify(reason, err)
		case <-timeout.C:
			kill(reasonTimeout, syscall.SIGTERM)
			grace = time.After(killGrace)
		case <-grace:
			_ = cmd.Process.Kill()
		case <-poll.C:
			if reason != "" || w.cfg.RunMemoryLimit <= 0 {
				continue
			}
			if rss, err := procfs.RSS(cmd.Process.Pid); err == nil && rss > w.cfg.RunMemoryLimit {
				kill(reasonMemory, syscall.SIGKILL)
			}
		case <-stop:
			stop = nil
			kill(reasonShutdown, syscall.SIGKILL)
		}
	}
}

// classify maps how the child ended to the conventions' result values.
func classify(reason string, err error) outcome {
	if err == nil {
		// It finished on its own, even if a kill raced with its exit.
		return outcome{result: "success"}
	}
	switch reason {
	case reasonTimeout:
		return outcome{result: "timeout", errorType: "TimeoutError", kill: reasonTimeout}
	case reasonMemory:
		return outcome{result: "error", errorType: "OOMError", kill: reasonMemory}
	case reasonShutdown:
		return outcome{result: "cancellation", errorType: "ShutdownError", kill: reasonShutdown}
	}
	return outcome{result: "failure", errorType: "ExitError"}
}
