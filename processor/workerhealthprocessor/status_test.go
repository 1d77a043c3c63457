//go:build !race

// Built without -race: these tests drive a whole collector (otelcol, its
// telemetry's exporters), whose dependency graph `make unit` would otherwise
// compile a second time, with -race, for no race in this module's code. `make
// unit` runs them in its pass without -race (Makefile, "unit").

package workerhealthprocessor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension"
	"github.com/workerwatch/workerwatch/internal/freeport"
)

// A failed checkpoint write reaches the worker_health extension's /readyz
// through a real collector service (its status aggregation, not a test
// double): a storage extension whose writes fail turns /readyz to 503
// naming the processor (recovery_duration 0), and to 200 again once its
// writes work.
func TestCheckpointFailureReachesReadyz(t *testing.T) {
	store := &memStorage{fail: errors.New("disk full")}
	storageType := component.MustNewType("test_storage")
	storageFactory := extension.NewFactory(storageType,
		func() component.Config { return &struct{}{} },
		func(context.Context, extension.Settings, component.Config) (extension.Extension, error) {
			return store, nil
		},
		component.StabilityLevelDevelopment)

	endpoint := freeport.Addr(t)

	yaml := fmt.Sprintf(`yaml:
receivers: {nop: {}}
exporters: {nop: {}}
processors:
  worker_health:
    emit_interval: 1s
    storage_id: test_storage
extensions:
  test_storage: {}
  worker_health:
    endpoint: %s
    recovery_duration: 0s
service:
  extensions: [test_storage, worker_health]
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
  pipelines:
    traces: {receivers: [nop], processors: [worker_health], exporters: [nop]}
`, endpoint)

	col, err := otelcol.NewCollector(otelcol.CollectorSettings{
		BuildInfo: component.NewDefaultBuildInfo(),
		Factories: func() (otelcol.Factories, error) {
			var f otelcol.Factories
			var err error
			f.Telemetry = otelconftelemetry.NewFactory()
			if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](receivertest.NewNopFactory()); err != nil {
				return f, err
			}
			if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](exportertest.NewNopFactory()); err != nil {
				return f, err
			}
			if f.Processors, err = otelcol.MakeFactoryMap[processor.Factory](NewFactory()); err != nil {
				return f, err
			}
			f.Extensions, err = otelcol.MakeFactoryMap[extension.Factory](workerhealthextension.NewFactory(), storageFactory)
			return f, err
		},
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: confmap.ResolverSettings{
			URIs: []string{yaml}, ProviderFactories: []confmap.ProviderFactory{yamlprovider.NewFactory()},
		}},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- col.Run(context.Background()) }()
	t.Cleanup(func() {
		col.Shutdown()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Error("the collector did not stop")
		}
	})

	readyz := func() (int, string) {
		resp, err := http.Get("http://" + endpoint + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(code int, what string) string {
		t.Helper()
		var last string
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			var got int
			if got, last = readyz(); got == code {
				return last
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("/readyz never answered %d (%s); last: %s", code, what, last)
		return ""
	}

	body := waitFor(http.StatusServiceUnavailable, "a failing checkpoint")
	var probe struct {
		Reasons    []string `json:"reasons"`
		Components []struct {
			ID, Kind, Status, Error string
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &probe), body)
	found := false
	for _, c := range probe.Components {
		if c.ID == "worker_health" && c.Kind == "processor" {
			found = true
			require.Equal(t, "recoverable_error", c.Status, body)
			require.Contains(t, c.Error, "disk full", body)
		}
	}
	require.True(t, found, "the processor's status is listed: %s", body)
	require.Contains(t, strings.Join(probe.Reasons, " "), "worker_health", body)

	store.mu.Lock()
	store.fail = nil
	store.mu.Unlock()
	waitFor(http.StatusOK, "the checkpoint written again")
}
