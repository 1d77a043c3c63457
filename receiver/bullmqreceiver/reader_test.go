package bullmqreceiver

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/workerwatch/workerwatch/internal/redistest"
)

// TestWorkersByQueue: the named workers of each queue out of CLIENT LIST
// replies (Redis 7's format, lib-name after name), every node's, each
// worker once however many connections it has; other names, other
// prefixes and unnamed connections are no workers.
func TestWorkersByQueue(t *testing.T) {
	jobs := base64.StdEncoding.EncodeToString([]byte("jobs"))
	big := base64.StdEncoding.EncodeToString([]byte("big:one"))
	node1 := "id=3 addr=127.0.0.1:5001 laddr=127.0.0.1:6379 fd=8 name=bull:" + jobs + ":w:w2 age=9 idle=0 flags=N db=0 cmd=client|list lib-name=go-redis lib-ver=9\n" +
		"id=4 addr=127.0.0.1:5002 laddr=127.0.0.1:6379 fd=9 name=bull:" + jobs + ":w:w1 age=9 idle=0 flags=N db=0 cmd=bzpopmin lib-name=bull:x:w:no\n" +
		"id=5 addr=127.0.0.1:5003 laddr=127.0.0.1:6379 fd=10 name= age=9 idle=0 flags=N db=0 cmd=ping\n" +
		"id=6 addr=127.0.0.1:5004 laddr=127.0.0.1:6379 fd=11 name=workerwatch-bullmq-receiver age=9 idle=0\n" +
		"id=7 addr=127.0.0.1:5005 laddr=127.0.0.1:6379 fd=12 name=other:" + jobs + ":w:elsewhere age=9 idle=0\n" +
		"id=8 addr=127.0.0.1:5006 laddr=127.0.0.1:6379 fd=13 name=bull:" + jobs + ":w: age=9 idle=0\n"
	node2 := "id=3 addr=127.0.0.1:5007 laddr=127.0.0.1:6380 fd=8 name=bull:" + jobs + ":w:w1 age=1 idle=0\n" +
		"id=4 addr=127.0.0.1:5008 laddr=127.0.0.1:6380 fd=9 name=bull:" + big + ":w:a:w:b age=1 idle=0\n"
	got := workersByQueue("bull", []string{node1, node2})
	assert.Equal(t, map[string][]string{
		jobs: {"w1", "w2"},
		big:  {"a:w:b"},
	}, got)
	assert.Equal(t, newQueueState("bull", "big:one").encoded, big)
}

// TestPollCommands: the Redis commands of a poll, as the README's "Cost"
// counts them and otelcol_bullmq_redis_commands reports them. The first
// poll: CLIENT LIST, the stream's end (XREVRANGE), the pipeline of 11
// (XREAD, LRANGE, 8 counts, EXISTS), one HMGET per active job; later polls
// with nothing new: CLIENT LIST and the pipeline.
func TestPollCommands(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	b := &bull{c: c, prefix: "bull", queue: "jobs"}
	for _, id := range []string{"1", "2", "3"} {
		b.add(ctx, t, id)
		b.activate(ctx, t, id, "w1")
	}
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(ctx)) }()
	r := pollingReceiver(t, tt, srv.Addr, "jobs")
	r.poll(ctx)
	require.Equal(t, int64(1+1+11+3), commandsSent(t, tt))
	r.poll(ctx)
	require.Equal(t, int64(1+1+11+3+1+11), commandsSent(t, tt))
}
