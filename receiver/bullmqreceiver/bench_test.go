package bullmqreceiver

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/workerwatch/workerwatch/internal/redistest"
	"github.com/workerwatch/workerwatch/receiver/bullmqreceiver/internal/metadata"
)

// BenchmarkPoll: one poll (every queue read once, its records and metrics
// built and handed on) against a real redis-server, with 1,000 active jobs
// held by 10 workers, in 1 queue or spread over 10. Reported per poll:
// Redis commands (redis-cmds/op) and the collector's CPU time
// (cpu-ms/op, from getrusage: user + system of this process, which also
// runs the benchmark's loop but not Redis). The first poll reads each
// active job's hash once (one HMGET per job: cold-redis-cmds); later polls
// read only what changed.
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
	cfg := testConfig(srv.Addr, names...)
	set := receivertest.NewNopSettings(metadata.Type)
	r, err := newReceiver(set, cfg)
	if err != nil {
		b.Fatal(err)
	}
	r.logs, r.metrics = consumertest.NewNop(), consumertest.NewNop()
	r.host = componenttest.NewNopHost()
	opts, _ := cfg.options(ctx)
	r.client = redis.NewUniversalClient(opts)
	defer r.client.Close()
	for _, q := range names {
		r.queues[q] = newQueueState(cfg.Prefix, q)
	}
	r.poll(ctx) // cold: every active job's hash
	cold := r.tel.sent.Load()
	r.tel.sent.Store(0)
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.poll(ctx)
	}
	b.StopTimer()
	b.ReportMetric(float64(r.tel.sent.Load())/float64(b.N), "redis-cmds/op")
	b.ReportMetric(float64(cold), "cold-redis-cmds")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1000/float64(b.N), "cpu-ms/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
