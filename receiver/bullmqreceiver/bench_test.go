package bullmqreceiver

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/workerwatch/workerwatch/internal/redistest"
	"github.com/workerwatch/workerwatch/receiver/bullmqreceiver/internal/metadatatest"
)

// BenchmarkPoll: one poll (every queue read once, its records and metrics
// built and handed on) against a real redis-server, with 1,000 active jobs
// held by 10 workers, in 1 queue or spread over 10. Reported per poll:
// Redis commands (redis-cmds/op) and the collector's CPU time
// (cpu-ms/op, from getrusage: user + system of this process, which also
// runs the benchmark's loop but not Redis). The first poll reads each
// active job's hash once (one HMGET per job: cold-redis-cmds); nothing
// changes after it, so the polls measured read no new event (the steady
// state of busy workers: the snapshot of 1,000 held jobs, the counts).
//
//	go test -run '^$' -bench BenchmarkPoll -benchtime 200x ./receiver/bullmqreceiver/
func BenchmarkPoll(b *testing.B) {
	for _, queues := range []int{1, 10} {
		b.Run(fmt.Sprintf("active=1000/queues=%d", queues), func(b *testing.B) {
			benchPoll(b, queues, 1000)
		})
	}
}

func benchPoll(b *testing.B, queues, active int) {
	srv := redistest.Start(b)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	var names []string
	for q := 0; q < queues; q++ {
		bq := &bull{c: c, prefix: "bull", queue: fmt.Sprintf("q%d", q)}
		names = append(names, bq.queue)
		pipe := c.Pipeline()
		for j := 0; j < active/queues; j++ {
			id := strconv.Itoa(j)
			pipe.HSet(ctx, bq.key(id), "name", "job", "pb", fmt.Sprintf("w%d", j%10), "ats", 1, "processedOn", time.Now().UnixMilli())
			pipe.LPush(ctx, bq.key("active"), id)
		}
		pipe.HSet(ctx, bq.key("meta"), "opts.maxLenEvents", 10000)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: bq.key("events"), Values: []any{"event", "waiting", "jobId", "0"}})
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	tt := componenttest.NewTelemetry()
	defer func() { _ = tt.Shutdown(ctx) }()
	r := pollingReceiver(b, tt, srv.Addr, names...)
	r.poll(ctx) // cold: every active job's hash
	cold := commandsSent(b, tt)
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.poll(ctx)
	}
	b.StopTimer()
	b.ReportMetric(float64(commandsSent(b, tt)-cold)/float64(b.N), "redis-cmds/op")
	b.ReportMetric(float64(cold), "cold-redis-cmds")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1000/float64(b.N), "cpu-ms/op")
}

// pollingReceiver is a receiver of queues on addr, started as Start would
// start it but without its loop: the caller calls poll. Its internal
// telemetry goes to tt.
func pollingReceiver(tb testing.TB, tt *componenttest.Telemetry, addr string, queues ...string) *bullReceiver {
	tb.Helper()
	cfg := testConfig(addr, queues...)
	r, err := newReceiver(metadatatest.NewSettings(tt), cfg)
	require.NoError(tb, err)
	r.logs, r.metrics = consumertest.NewNop(), consumertest.NewNop()
	r.host = componenttest.NewNopHost()
	opts, err := cfg.options(context.Background())
	require.NoError(tb, err)
	r.client = redis.NewUniversalClient(opts)
	tb.Cleanup(func() { _ = r.client.Close() })
	for _, q := range queues {
		r.queues[q] = newQueueState(cfg.Prefix, q)
	}
	return r
}

// commandsSent is the receiver's otelcol_bullmq_redis_commands so far.
func commandsSent(tb testing.TB, tt *componenttest.Telemetry) int64 {
	tb.Helper()
	m, err := tt.GetMetric("otelcol_bullmq_redis_commands")
	require.NoError(tb, err)
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(tb, ok, "otelcol_bullmq_redis_commands is %T", m.Data)
	var n int64
	for _, dp := range sum.DataPoints {
		n += dp.Value
	}
	return n
}
