//go:build e2e

package e2e

// The collector itself paused (as a VM is paused or live-migrated, or a
// process starved of CPU), through the real binary with the shipped
// config.yaml (emit_interval 5 s, lost.after 30 s): stopped with SIGSTOP for
// longer than lost.after while its workers run on and keep sending, then
// resumed. The first evaluation after the pause must not judge the workers
// by silence it did not witness (docs/health-rules.md, "Pauses"): none is
// ever `lost`, each reports again, and the collector logs the pause.
//
//	make build && go test -tags e2e -count=1 -v -run 'TestCollectorPaused' ./e2e/

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
)

func TestCollectorPaused(t *testing.T) {
	defer parallel(t, 85*time.Second)()
	prefix := runPrefix + "pause-"
	j, e := startIncarnationFleet(t, "pause", prefix, 2)
	ids := []string{prefix + "1", prefix + "2"}
	for _, id := range ids {
		eventually(t, 90*time.Second, 250*time.Millisecond, id+" healthy", func() error {
			w, err := worker(e, id)
			if err != nil {
				return err
			}
			if w.State != contract.Healthy {
				return fmt.Errorf("state %s %v", w.State, reasonCodes(w))
			}
			return nil
		})
	}

	// Longer than lost.after (30 s): without the rule, the first
	// evaluation after it finds both workers silent for 35 s.
	const pause = 35 * time.Second
	pid := j.col.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
	// A condition with a deadline cannot stand in here: the pause is the
	// input, a stopped process has nothing to wait on.
	time.Sleep(pause)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()

	// Until each worker has reported again and then a whole lost.after
	// more has passed, every answer is checked: never lost. A false lost
	// would last several evaluations (hysteresis.recover_evaluations), far
	// longer than the 250 ms between answers.
	reported := map[string]bool{}
	answers := 0
	for time.Since(resumed) < 40*time.Second || len(reported) < len(ids) {
		if time.Since(resumed) > 120*time.Second {
			t.Fatalf("not every worker reported again after the pause: %v", reported)
		}
		for _, id := range ids {
			w, err := worker(e, id)
			if err != nil {
				continue // the API may be slow to answer just after the resume
			}
			answers++
			if w.State == contract.Lost {
				t.Fatalf("%s lost %.1fs after the collector resumed: %+v", id, time.Since(resumed).Seconds(), w.Reasons)
			}
			if w.Sources.Telemetry().LastSeen.Time().After(resumed) {
				reported[id] = true
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	raw, err := os.ReadFile(j.col.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "this evaluation ran long after the previous one") {
		t.Fatalf("the collector did not log the pause (%s)", j.col.log)
	}
	t.Logf("e2e: paused %s; %d answers over %.1fs after it, none lost", pause, answers, time.Since(resumed).Seconds())
}
