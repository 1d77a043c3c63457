package bullmqreceiver

import (
	"context"
	"encoding/base64"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/extension/xextension/storage"
)

// bull writes what BullMQ 6.7's scripts write (moveToActive's
// prepareJobForProcessing, moveToFinished, moveStalledJobsToWait), command
// for command, for the receiver to read: the end-to-end test runs the real
// BullMQ.
type bull struct {
	c      redis.Cmdable // a node's client, or a cluster's
	prefix string
	queue  string
}

func (b *bull) key(s string) string { return b.prefix + ":" + b.queue + ":" + s }

func (b *bull) add(ctx context.Context, tb testing.TB, id string) {
	tb.Helper()
	require.NoError(tb, b.c.HSet(ctx, b.key(id), "name", "job", "data", "{}", "timestamp", time.Now().UnixMilli()).Err())
	require.NoError(tb, b.c.HSet(ctx, b.key("meta"), "opts.maxLenEvents", 10000).Err())
	require.NoError(tb, b.c.LPush(ctx, b.key("wait"), id).Err())
	require.NoError(tb, b.c.XAdd(ctx, &redis.XAddArgs{Stream: b.key("events"), Values: []any{"event", "waiting", "jobId", id}}).Err())
}

func (b *bull) activate(ctx context.Context, tb testing.TB, id, worker string) {
	tb.Helper()
	require.NoError(tb, b.c.LRem(ctx, b.key("wait"), 1, id).Err())
	require.NoError(tb, b.c.LPush(ctx, b.key("active"), id).Err())
	require.NoError(tb, b.c.Set(ctx, b.key(id)+":lock", "token", 30*time.Second).Err())
	require.NoError(tb, b.c.XAdd(ctx, &redis.XAddArgs{Stream: b.key("events"), Values: []any{"event", "active", "jobId", id, "prev", "waiting"}}).Err())
	require.NoError(tb, b.c.HSet(ctx, b.key(id), "processedOn", time.Now().UnixMilli(), "pb", worker).Err())
	require.NoError(tb, b.c.HIncrBy(ctx, b.key(id), "ats", 1).Err())
}

func (b *bull) finish(ctx context.Context, tb testing.TB, id, reason string) {
	tb.Helper()
	require.NoError(tb, b.c.LRem(ctx, b.key("active"), 1, id).Err())
	require.NoError(tb, b.c.Del(ctx, b.key(id)+":lock").Err())
	if reason == "" {
		require.NoError(tb, b.c.ZAdd(ctx, b.key("completed"), redis.Z{Score: 1, Member: id}).Err())
		require.NoError(tb, b.c.XAdd(ctx, &redis.XAddArgs{Stream: b.key("events"), Values: []any{"event", "completed", "jobId", id, "returnvalue", "null", "prev", "active"}}).Err())
		return
	}
	require.NoError(tb, b.c.HSet(ctx, b.key(id), "failedReason", reason).Err())
	require.NoError(tb, b.c.ZAdd(ctx, b.key("failed"), redis.Z{Score: 1, Member: id}).Err())
	require.NoError(tb, b.c.XAdd(ctx, &redis.XAddArgs{Stream: b.key("events"), Values: []any{"event", "failed", "jobId", id, "failedReason", reason, "prev", "active"}}).Err())
}

func (b *bull) stall(ctx context.Context, tb testing.TB, id string) {
	tb.Helper()
	require.NoError(tb, b.c.Del(ctx, b.key(id)+":lock").Err())
	require.NoError(tb, b.c.LRem(ctx, b.key("active"), 1, id).Err())
	require.NoError(tb, b.c.HIncrBy(ctx, b.key(id), "stc", 1).Err())
	require.NoError(tb, b.c.RPush(ctx, b.key("wait"), id).Err())
	require.NoError(tb, b.c.XAdd(ctx, &redis.XAddArgs{Stream: b.key("events"), Values: []any{"event", "waiting", "jobId", id, "prev", "active"}}).Err())
	require.NoError(tb, b.c.XAdd(ctx, &redis.XAddArgs{Stream: b.key("events"), Values: []any{"event", "stalled", "jobId", id}}).Err())
}

// connectWorker opens a connection named as a BullMQ Worker names its own
// (RedisConnection: CLIENT SETNAME <prefix>:<base64 queue>:w:<name>).
func (b *bull) connectWorker(tb testing.TB, addr, name string) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, PoolSize: 1, MinIdleConns: 1,
		ClientName: b.prefix + ":" + base64.StdEncoding.EncodeToString([]byte(b.queue)) + ":w:" + name,
	})
	require.NoError(tb, c.Ping(context.Background()).Err())
	tb.Cleanup(func() { _ = c.Close() })
}

// statusHost records the component status the receiver reports.
type statusHost struct {
	component.Host
	ext    map[component.ID]component.Component
	mu     sync.Mutex
	events []*componentstatus.Event
}

func (h *statusHost) GetExtensions() map[component.ID]component.Component { return h.ext }

func (h *statusHost) Report(ev *componentstatus.Event) {
	h.mu.Lock()
	h.events = append(h.events, ev)
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

// memStorage is an in-memory storage extension (the file_storage
// extension's contract: Get of a missing key is nil, nil).
type memStorage struct {
	component.StartFunc
	component.ShutdownFunc
	mu   sync.Mutex
	data map[string][]byte
}

func newMemStorage() *memStorage { return &memStorage{data: map[string][]byte{}} }

func (m *memStorage) GetClient(context.Context, component.Kind, component.ID, string) (storage.Client, error) {
	return memClient{m}, nil
}

type memClient struct{ m *memStorage }

func (c memClient) Get(_ context.Context, k string) ([]byte, error) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.m.data[k], nil
}

func (c memClient) Set(_ context.Context, k string, v []byte) error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.data[k] = append([]byte(nil), v...)
	return nil
}

func (c memClient) Delete(_ context.Context, k string) error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	delete(c.m.data, k)
	return nil
}

func (c memClient) Batch(ctx context.Context, ops ...*storage.Operation) error {
	for _, op := range ops {
		var err error
		switch op.Type {
		case storage.Get:
			op.Value, err = c.Get(ctx, op.Key)
		case storage.Set:
			err = c.Set(ctx, op.Key, op.Value)
		case storage.Delete:
			err = c.Delete(ctx, op.Key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (memClient) Close(context.Context) error { return nil }

func eventually(tb testing.TB, within time.Duration, what string, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// retry writes what retryJob-11.lua writes for a failed attempt BullMQ
// retries at once: the job back to wait, `waiting` with prev "active" (as a
// stall's, but no `stalled` entry follows).
func (b *bull) retry(ctx context.Context, tb testing.TB, id, reason string) {
	tb.Helper()
	require.NoError(tb, b.c.HSet(ctx, b.key(id), "failedReason", reason).Err())
	require.NoError(tb, b.c.HIncrBy(ctx, b.key(id), "atm", 1).Err())
	require.NoError(tb, b.c.LRem(ctx, b.key("active"), 1, id).Err())
	require.NoError(tb, b.c.Del(ctx, b.key(id)+":lock").Err())
	require.NoError(tb, b.c.LPush(ctx, b.key("wait"), id).Err())
	require.NoError(tb, b.c.XAdd(ctx, &redis.XAddArgs{Stream: b.key("events"), Values: []any{"event", "waiting", "jobId", id, "prev", "active"}}).Err())
}
