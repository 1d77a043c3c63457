//go:build !race

// Built without -race: these tests drive the loadbalancing exporter (a
// Kubernetes client and the AWS SDK among its dependencies), whose dependency
// graph `make unit` would otherwise compile a second time, with -race, for no
// race in this module's code. `make unit` runs them in its pass without -race
// (Makefile, "unit").

package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/loadbalancingexporter"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/ring"
)

// idSink is an OTLP/gRPC logs backend recording the worker ids it got.
type idSink struct {
	plogotlp.UnimplementedGRPCServer
	mu  sync.Mutex
	ids map[string]bool
	n   int
}

func (s *idSink) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rls := req.Logs().ResourceLogs()
	for i := range rls.Len() {
		sls := rls.At(i).ScopeLogs()
		for j := range sls.Len() {
			lrs := sls.At(j).LogRecords()
			for k := range lrs.Len() {
				id := ""
				if v, ok := lrs.At(k).Attributes().Get(contract.AttrWorkerID); ok {
					id = v.Str()
				}
				s.ids[id] = true
				s.n++
			}
		}
	}
	return plogotlp.NewExportResponse(), nil
}

func (s *idSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// The ring must send each worker where contrib's load_balancing exporter
// (v0.161.0, the one in the distribution) sends its records, or shards
// would answer for workers they never see. The real exporter routes 20,000
// ids (and a record without one) to three backends; the ring must name the
// same backend for every id.
func TestRingMatchesLoadBalancingExporter(t *testing.T) {
	sinks := make([]*idSink, 3)
	var hostnames []string
	for i := range sinks {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		sinks[i] = &idSink{ids: map[string]bool{}}
		srv := grpc.NewServer()
		plogotlp.RegisterGRPCServer(srv, sinks[i])
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(srv.Stop)
		hostnames = append(hostnames, ln.Addr().String())
	}

	f := loadbalancingexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*loadbalancingexporter.Config)
	cfg.RoutingKey = "attributes"
	cfg.RoutingAttributes = []string{contract.AttrWorkerID}
	cfg.Protocol.OTLP.ClientConfig.TLS.Insecure = true
	cfg.Resolver.Static = configoptional.Some(loadbalancingexporter.StaticResolver{Hostnames: hostnames})
	exp, err := f.CreateLogs(context.Background(), exportertest.NewNopSettings(f.Type()), cfg)
	require.NoError(t, err)
	require.NoError(t, exp.Start(context.Background(), componenttest.NewNopHost()))
	defer func() { require.NoError(t, exp.Shutdown(context.Background())) }()

	const n = 20000
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for i := range n {
		// Ids of several shapes: pod names, numbers, unicode.
		id := fmt.Sprintf("openfn-worker-%d", i)
		switch i % 4 {
		case 1:
			id = strconv.Itoa(i * 7919)
		case 2:
			id = fmt.Sprintf("wörker-%x", i)
		}
		lrs.AppendEmpty().Attributes().PutStr(contract.AttrWorkerID, id)
	}
	lrs.AppendEmpty() // no worker id: "cicd.worker.id=|"
	require.NoError(t, exp.ConsumeLogs(context.Background(), ld))
	require.Eventually(t, func() bool {
		return sinks[0].count()+sinks[1].count()+sinks[2].count() == n+1
	}, 30*time.Second, 20*time.Millisecond)

	r := ring.New(hostnames)
	perSink := make([]int, len(sinks))
	for i, s := range sinks {
		for id := range s.ids {
			require.Equal(t, hostnames[i], r.Owner(id), "the exporter sent %q to %s", id, hostnames[i])
			perSink[i]++
		}
	}
	for i, c := range perSink {
		assert.Greater(t, c, n/6, "backend %d got %d of %d ids: the ring spreads them", i, c, n)
	}
}

func TestDNSMembersFormLikeTheExporter(t *testing.T) {
	d := &dnsMembers{hostname: "shards", port: "4317", apiPort: "8090", lookup: func(context.Context, string) ([]net.IPAddr, error) {
		return []net.IPAddr{{IP: net.ParseIP("10.0.0.9")}, {IP: net.ParseIP("10.0.0.10")}, {IP: net.ParseIP("fd00::1")}}, nil
	}}
	ms, err := d.resolve(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []member{
		{endpoint: "10.0.0.10:4317", api: "10.0.0.10:8090"},
		{endpoint: "10.0.0.9:4317", api: "10.0.0.9:8090"},
		{endpoint: "[fd00::1]:4317", api: "[fd00::1]:8090"},
	}, ms)
	d.port = "" // the exporter's ring names are then the bare addresses
	ms, err = d.resolve(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.10", ms[0].endpoint)
	assert.Equal(t, "10.0.0.10:8090", ms[0].api)
}
