//go:build linux

package workerprocessreceiver

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/procfs"
	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

// resourceOf returns the resource attributes of a worker's resource in md.
func resourceOf(md pmetric.Metrics, id string) (pcommon.Map, bool) {
	for _, rm := range md.ResourceMetrics().All() {
		if v, ok := rm.Resource().Attributes().Get(contract.AttrWorkerID); ok && v.Str() == id {
			return rm.Resource().Attributes(), true
		}
	}
	return pcommon.Map{}, false
}

// creationTime is what the receiver must state for a live pid: the boot
// time plus the pid's start time, formatted as formatTime does.
func creationTime(t *testing.T, pid int) string {
	t.Helper()
	var st procfs.Stat
	require.NoError(t, procfs.NewReader("/proc").ReadStat(int32(pid), &st))
	bt, err := procfs.NewReader("/proc").BootTime()
	require.NoError(t, err)
	return formatTime(procfs.StartTime(bt, st.Starttime))
}

// TestIncarnationOnResource: the worker's resource states its root's pid and
// creation time; when the root is gone (found by a scrape, no process
// events), the resource states the root that ended and when, with no exit
// code or signal (unknown); a new root is a new incarnation with no exit.
func TestIncarnationOnResource(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	cfg := realConfig()
	cfg.ProcessEvents = processEventsOff
	s := newTestScraper(t, cfg)
	require.NoError(t, s.start(context.Background(), nil))
	const id = "incarnation-scrape"
	a := startTree(t, id, true)
	created := creationTime(t, a.pids[0])

	md, err := s.scrape(context.Background())
	require.NoError(t, err)
	attrs, ok := resourceOf(md, id)
	require.True(t, ok)
	assert.Equal(t, map[string]any{
		contract.AttrWorkerID: id, contract.AttrWorkerName: "name-" + id,
		contract.AttrPID: int64(a.pids[0]), contract.AttrProcessCreationTime: created,
	}, attrs.AsRaw())
	_, err = time.Parse(time.RFC3339Nano, created)
	require.NoError(t, err, "ISO 8601")

	before := time.Now()
	a.killGroup(t)
	md, err = s.scrape(context.Background())
	require.NoError(t, err)
	attrs, _ = resourceOf(md, id)
	v, _ := findValue(md, id, "workerwatch.worker.present", nil)
	assert.Equal(t, 0.0, v)
	pid, _ := attrs.Get(contract.AttrPID)
	assert.Equal(t, int64(a.pids[0]), pid.Int(), "the root that ended")
	ct, _ := attrs.Get(contract.AttrProcessCreationTime)
	assert.Equal(t, created, ct.Str())
	et, ok := attrs.Get(contract.AttrProcessExitTime)
	require.True(t, ok)
	at, err := time.Parse(time.RFC3339Nano, et.Str())
	require.NoError(t, err)
	assert.False(t, at.Before(before.Add(-time.Second)), "exit time %v is the scrape's", at)
	_, hasCode := attrs.Get(contract.AttrProcessExitCode)
	_, hasSig := attrs.Get(contract.AttrProcessExitSignal)
	assert.False(t, hasCode || hasSig, "a scrape cannot know how the root ended")

	b := startTree(t, id, true)
	md, err = s.scrape(context.Background())
	require.NoError(t, err)
	attrs, _ = resourceOf(md, id)
	assert.Equal(t, map[string]any{
		contract.AttrWorkerID: id, contract.AttrWorkerName: "name-" + id,
		contract.AttrPID: int64(b.pids[0]), contract.AttrProcessCreationTime: creationTime(t, b.pids[0]),
	}, attrs.AsRaw(), "a new incarnation, no exit")
}

// TestRootExitAtOnce: with the kernel's process events, a root's exit is
// scraped and sent at once (no scrape is called here: only the exit's), with
// the signal that killed it, or its exit code.
func TestRootExitAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	cfg := realConfig()
	cfg.ProcessEvents = processEventsNetlink
	s, err := newWorkerScraper(receivertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	sink := new(consumertest.MetricsSink)
	s.next = sink
	if err := s.start(context.Background(), componenttest.NewNopHost()); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("proc connector unavailable: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })

	// exitOf waits for the sent resource of the worker with the root gone.
	exitOf := func(t *testing.T, id string) pcommon.Map {
		t.Helper()
		var out pcommon.Map
		require.Eventually(t, func() bool {
			for _, md := range sink.AllMetrics() {
				if attrs, ok := resourceOf(md, id); ok {
					if _, ok := attrs.Get(contract.AttrProcessExitTime); ok {
						out = attrs
						return true
					}
				}
			}
			return false
		}, 5*time.Second, 10*time.Millisecond, "the exit of %s was not sent", id)
		return out
	}

	t.Run("SIGKILL", func(t *testing.T) {
		const id = "incarnation-kill"
		tr := startTree(t, id, true)
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(tr.pids[0], syscall.SIGKILL))
		attrs := exitOf(t, id)
		pid, _ := attrs.Get(contract.AttrPID)
		assert.Equal(t, int64(tr.pids[0]), pid.Int())
		sig, ok := attrs.Get(contract.AttrProcessExitSignal)
		require.True(t, ok, "signal on %v", attrs.AsRaw())
		assert.Equal(t, int64(9), sig.Int())
		_, hasCode := attrs.Get(contract.AttrProcessExitCode)
		assert.False(t, hasCode)
	})
	t.Run("restarted", func(t *testing.T) {
		// A supervisor's restart a moment after the exit (no scrape is
		// called here): the exit's scrape, or the follow-up scrape a
		// second later, sends the new root.
		const id = "incarnation-restart"
		a := startTree(t, id, true)
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
		a.killGroup(t)
		b := startTree(t, id, true)
		require.Eventually(t, func() bool {
			for _, md := range sink.AllMetrics() {
				if attrs, ok := resourceOf(md, id); ok {
					if pid, ok := attrs.Get(contract.AttrPID); ok && pid.Int() == int64(b.pids[0]) {
						return true
					}
				}
			}
			return false
		}, 5*time.Second, 10*time.Millisecond, "the restarted root was not sent")
	})
	t.Run("restarted after the follow-up", func(t *testing.T) {
		// Another worker of the kind keeps it present, so no scan would
		// run before discovery_interval (1m): after an exit the receiver
		// scans at every scrape for a while, and a restart a few seconds
		// later is found by the next scrape.
		const id = "incarnation-late"
		other := startTree(t, "incarnation-other", true)
		_ = other
		a := startTree(t, id, true)
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
		a.killGroup(t)
		exitOf(t, id)
		time.Sleep(exitFollowUp + 200*time.Millisecond) // the follow-up found nothing
		b := startTree(t, id, true)
		md, err := s.scrape(context.Background())
		require.NoError(t, err)
		attrs, ok := resourceOf(md, id)
		require.True(t, ok)
		pid, _ := attrs.Get(contract.AttrPID)
		assert.Equal(t, int64(b.pids[0]), pid.Int(), "the restarted root, found by the next scrape")
	})
	t.Run("exit code", func(t *testing.T) {
		const id = "incarnation-code"
		tr := startTree(t, id, true)
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
		_, err = tr.stdin.Write([]byte("exit 3\n"))
		require.NoError(t, err)
		attrs := exitOf(t, id)
		code, ok := attrs.Get(contract.AttrProcessExitCode)
		require.True(t, ok, "code on %v", attrs.AsRaw())
		assert.Equal(t, int64(3), code.Int())
		_, hasSig := attrs.Get(contract.AttrProcessExitSignal)
		assert.False(t, hasSig)
	})
}
