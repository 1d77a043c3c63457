//go:build linux

package workerprocessreceiver

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

// A pid file selector that matches nothing says why, naming the file: once
// per reason (missing, no pid, no live process), not on every scrape, and
// again after the worker was found in between.
func TestPIDFileAbsenceNamedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	pidFile := filepath.Join(t.TempDir(), "worker.pid")
	cfg := createDefaultConfig().(*Config)
	cfg.ProcessEvents = processEventsOff
	cfg.Workers = []WorkerConfig{{ID: "w", Selector: SelectorConfig{PIDFile: pidFile}}}
	require.NoError(t, cfg.Validate())
	s, err := newWorkerScraper(set, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })
	scrape := func(n int) {
		for i := 0; i < n; i++ {
			md, err := s.scrape(context.Background())
			require.NoError(t, err)
			_, ok := findValue(md, "w", "workerwatch.worker.present", nil)
			require.True(t, ok)
		}
	}
	naming := func(snippet string) []observer.LoggedEntry {
		return logs.FilterMessageSnippet(snippet).FilterField(zap.String("pid_file", pidFile)).All()
	}

	scrape(3)
	require.Len(t, naming("pid file not found"), 1, "all logs: %v", logs.All())
	assert.Equal(t, "workers[0]", naming("pid file not found")[0].ContextMap()["worker"])

	require.NoError(t, os.WriteFile(pidFile, []byte("not a pid\n"), 0o644))
	scrape(3)
	assert.Len(t, naming("holds no pid"), 1)

	// Our own pid: found; then gone again: logged again, once.
	require.NoError(t, os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644))
	scrape(2)
	require.NoError(t, os.Remove(pidFile))
	scrape(3)
	assert.Len(t, naming("pid file not found"), 2)
	assert.Equal(t, 3, logs.Len(), "nothing else is logged: %v", logs.All())
}
