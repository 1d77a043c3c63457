//go:build linux

package workerprocessreceiver

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

// enableAll switches every metric of the builder config on.
func enableAll(t *testing.T, mbc *metadata.MetricsBuilderConfig) {
	v := reflect.ValueOf(&mbc.Metrics).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i).FieldByName("Enabled")
		require.True(t, f.IsValid(), v.Type().Field(i).Name)
		f.SetBool(true)
	}
}

// TestNamesAreTheContracts: every metric the receiver can emit, every
// attribute key on what it emits and every built-in role value are named in
// internal/contract, so the receiver, the processor, the simulator and the
// docs cannot drift apart. It checks the generated metric list and a real
// scrape of the fixture tree with every metric enabled, which must emit each
// of them.
func TestNamesAreTheContracts(t *testing.T) {
	inContract := func(name string) bool { return slices.Contains(contract.ReceiverMetrics[:], name) }
	declared := map[string]bool{}
	v := reflect.ValueOf(metadata.MetricsInfo)
	for i := 0; i < v.NumField(); i++ {
		name := v.Field(i).FieldByName("Name").String()
		require.NotEmpty(t, name, v.Type().Field(i).Name)
		declared[name] = true
		assert.True(t, inContract(name), "metadata.yaml metric %q is not named in internal/contract (ReceiverMetrics)", name)
	}
	for _, name := range contract.ReceiverMetrics {
		assert.True(t, declared[name], "internal/contract names %q, which metadata.yaml does not declare", name)
	}

	root := copyFixture(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc", "100", "smaps_rollup"), []byte("Rss: 40960 kB\nPss: 30000 kB\n"), 0o644))
	cfg := fixtureConfig(root)
	enableAll(t, &cfg.MetricsBuilderConfig)
	cfg.TopProcessesCommandLine.Enabled = true
	s := newTestScraper(t, cfg)
	clock := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return clock }
	require.NoError(t, s.start(context.Background(), nil))
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	clock = clock.Add(10 * time.Second)
	md, err := s.scrape(context.Background())
	require.NoError(t, err)

	attrs := []string{
		contract.AttrWorkerID, contract.AttrWorkerName, contract.AttrRole, contract.AttrCPUMode,
		contract.AttrPID, contract.AttrExecutableName, contract.AttrCommandLine,
		contract.AttrProcessCreationTime, contract.AttrProcessExitTime,
		contract.AttrProcessExitCode, contract.AttrProcessExitSignal,
	}
	configured := map[string]bool{contract.RoleMain: true, contract.RoleChild: true}
	for _, w := range cfg.Workers {
		for _, r := range w.Roles {
			configured[r.Name] = true
		}
	}
	emitted := map[string]bool{}
	checkAttrs := func(where string, m pcommon.Map) {
		for k, val := range m.All() {
			assert.Contains(t, attrs, k, "%s: attribute key not in internal/contract", where)
			if k == contract.AttrRole {
				assert.True(t, configured[val.Str()], "%s: role %q is neither a contract role nor configured", where, val.Str())
			}
		}
	}
	for _, rm := range md.ResourceMetrics().All() {
		checkAttrs("resource", rm.Resource().Attributes())
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				emitted[m.Name()] = true
				assert.True(t, inContract(m.Name()), "emitted metric %q is not named in internal/contract", m.Name())
				var dps pmetric.NumberDataPointSlice
				if m.Type() == pmetric.MetricTypeSum {
					dps = m.Sum().DataPoints()
				} else {
					dps = m.Gauge().DataPoints()
				}
				for _, dp := range dps.All() {
					checkAttrs(m.Name(), dp.Attributes())
				}
			}
		}
	}
	for name := range declared {
		assert.True(t, emitted[name], "%s was not emitted: the fixture no longer covers it", name)
	}
}
