package celeryreceiver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/workerwatch/workerwatch/internal/redistest"
)

// benchEnvelopes builds 1,000 events as a worker publishes them: per task
// a task-received, a task-started and a task-succeeded (in task.multi
// batches of one, as the recorded run shows), and a heartbeat every 10
// tasks; 30 workers, unique task ids.
func benchEnvelopes() [][]byte {
	var out [][]byte
	wrap := func(body any) []byte {
		raw, _ := json.Marshal(body)
		env, _ := json.Marshal(map[string]any{
			"body": base64.StdEncoding.EncodeToString(raw), "content-encoding": "utf-8", "content-type": "application/json",
			"properties": map[string]any{"body_encoding": "base64", "delivery_info": map[string]any{"exchange": "celeryev", "routing_key": "task.multi"}},
		})
		return env
	}
	n := 0
	for task := 0; n < 1000; task++ {
		host := fmt.Sprintf("w%d@host", task%30)
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", task)
		base := map[string]any{"hostname": host, "pid": 100 + task%30, "uuid": id, "timestamp": 1796160474.5, "utcoffset": 0, "clock": task}
		for _, typ := range []string{"task-received", "task-started", "task-succeeded"} {
			ev := map[string]any{"type": typ}
			for k, v := range base {
				ev[k] = v
			}
			if typ == "task-received" {
				ev["name"], ev["args"], ev["kwargs"], ev["retries"] = "tasks.ok", "()", "{}", 0
			}
			if typ == "task-succeeded" {
				ev["result"], ev["runtime"] = "'ok'", 0.15
			}
			out = append(out, wrap([]any{ev}))
			n++
		}
		if task%10 == 0 && n < 1000 {
			out = append(out, wrap(map[string]any{
				"type": "worker-heartbeat", "hostname": host, "pid": 100 + task%30,
				"freq": 2.0, "active": 1, "processed": task, "loadavg": []float64{1, 1, 1}, "sw_ident": "py-celery",
				"sw_ver": "5.2.6", "sw_sys": "Linux", "timestamp": 1796160474.5,
			}))
			n++
		}
	}
	return out[:1000]
}

// BenchmarkEvents: the receiver's cost per 1,000 events (one op), from the
// kombu envelope to the records handed to the logs pipeline.
func BenchmarkEvents(b *testing.B) {
	envs := benchEnvelopes()
	r, err := newReceiver(receiverSettings(), testConfig("redis://127.0.0.1:1/0"))
	if err != nil {
		b.Fatal(err)
	}
	r.logs = consumertest.NewNop()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, e := range envs {
			r.handleEnvelope(e)
		}
	}
}

// BenchmarkQueueLengths: reading one queue's length from a real
// redis-server (LLEN of its four priority lists, one pipeline), per queue.
func BenchmarkQueueLengths(b *testing.B) {
	srv := redistest.Start(b)
	r, err := newReceiver(receiverSettings(), testConfig(fmt.Sprintf("redis://%s/0", srv.Addr)))
	if err != nil {
		b.Fatal(err)
	}
	tr, err := newRedis(r)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.close()
	queues := make([]string, 10)
	for i := range queues {
		queues[i] = fmt.Sprintf("q%d", i)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tr.queueLengths(ctx, queues); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(queues)), "ns/queue")
}
