package celeryreceiver

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/workerwatch/workerwatch/internal/redistest"
	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadata"
)

// redisClient is a client of a test's redis-server, closed with the test.
func redisClient(t testing.TB, srv *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor waits for cond, up to within.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recorded is one message of a recorded Celery run: the Redis channel and
// the kombu envelope published on it.
type recorded struct{ channel, payload string }

// loadRecorded reads testdata/<name>: channel TAB payload per line,
// recorded with `redis-cli psubscribe '*'` from a real Celery 5.2.6 run
// (README.md, "Tests and benchmark").
func loadRecorded(t testing.TB, name string) []recorded {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []recorded
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ch, p, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			t.Fatalf("%s: a line without a tab", name)
		}
		out = append(out, recorded{ch, p})
	}
	return out
}

// statusHost records the component statuses reported to it.
type statusHost struct {
	component.Host
	mu     sync.Mutex
	events []*componentstatus.Event
}

func (h *statusHost) Report(e *componentstatus.Event) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

func (h *statusHost) last() *componentstatus.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) == 0 {
		return nil
	}
	return h.events[len(h.events)-1]
}

// started is a receiver serving both pipelines, started on host.
type started struct {
	logs    *consumertest.LogsSink
	metrics *consumertest.MetricsSink
	host    *statusHost
	r       *celeryReceiver
}

func startReceiver(t testing.TB, cfg *Config) *started {
	t.Helper()
	f := NewFactory()
	set := receivertest.NewNopSettings(metadata.Type)
	s := &started{logs: new(consumertest.LogsSink), metrics: new(consumertest.MetricsSink), host: &statusHost{Host: componenttest.NewNopHost()}}
	lr, err := f.CreateLogs(context.Background(), set, cfg, s.logs)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := f.CreateMetrics(context.Background(), set, cfg, s.metrics)
	if err != nil {
		t.Fatal(err)
	}
	s.r = lr.(*celeryReceiver)
	if err := lr.Start(context.Background(), s.host); err != nil {
		t.Fatal(err)
	}
	if err := mr.Start(context.Background(), s.host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mr.Shutdown(context.Background())
		_ = lr.Shutdown(context.Background())
	})
	return s
}

// rec is one emitted log record, flattened.
type rec struct {
	service, worker, event string
	attrs                  map[string]any
}

func records(lds []plog.Logs) []rec {
	var out []rec
	for _, ld := range lds {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			rl := ld.ResourceLogs().At(i)
			ra := rl.Resource().Attributes().AsRaw()
			svc, _ := ra["service.name"].(string)
			wid, _ := ra["cicd.worker.id"].(string)
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					lr := lrs.At(k)
					out = append(out, rec{svc, wid, lr.EventName(), lr.Attributes().AsRaw()})
				}
			}
		}
	}
	return out
}

func receiverSettings() receiver.Settings { return receivertest.NewNopSettings(metadata.Type) }
