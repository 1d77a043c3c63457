package bullmqreceiver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componentstatus"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/redistest"
)

// readOnlyACL is the Redis ACL the README gives: read-only key access to the
// prefix, and exactly the commands the receiver sends.
const readOnlyACL = "on >ro-secret resetkeys %R~bull:* resetchannels -@all " +
	"+hello +ping +select +client|setname +client|list " +
	"+scan +xread +xrange +xrevrange +lrange +llen +zcard +exists +hmget"

// TestReceiverReadOnlyACL: the receiver does its whole work (discovery,
// snapshot, events, counts) as a user with the README's ACL and no more, so
// the ACL lists every command it uses and the receiver writes nothing.
func TestReceiverReadOnlyACL(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	args := []any{"ACL", "SETUSER", "workerwatch"}
	for _, f := range strings.Fields(readOnlyACL) {
		args = append(args, f)
	}
	require.NoError(t, c.Do(ctx, args...).Err())
	b := &bull{c: c, prefix: "bull", queue: "jobs"}
	b.add(ctx, t, "1")
	b.connectWorker(t, srv.Addr, "w1")

	cfg := testConfig(srv.Addr) // discovery: SCAN
	cfg.Username, cfg.Password = "workerwatch", "ro-secret"
	h := startReceiver(t, cfg, nil)
	h.polled()
	b.activate(ctx, t, "1", "w1")
	b.finish(ctx, t, "1", "")
	eventually(t, 10*time.Second, "job 1 read as the read-only user", func() error {
		rs := records(h.logs)
		if find(rs, "w1", contract.EventStarted, "1") == nil || find(rs, "w1", contract.EventFinished, "1") == nil {
			return fmt.Errorf("records %v", rs)
		}
		if got, ok := lastSnapshot(rs, "jobs", "w1"); !ok || len(got) != 0 {
			return fmt.Errorf("w1 snapshot %v %v", got, ok)
		}
		return nil
	})
	if ev := h.host.last(); ev.Status() != componentstatus.StatusOK {
		t.Fatalf("status %v: %v", ev.Status(), ev.Err())
	}
	// Redis' ACL log records every command or key the user was refused.
	entries, err := c.Do(ctx, "ACL", "LOG").Slice()
	require.NoError(t, err)
	require.Empty(t, entries, "commands refused to the read-only user")
	// And the user really cannot write.
	ro := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "workerwatch", Password: "ro-secret"})
	defer ro.Close()
	require.ErrorContains(t, ro.Set(ctx, "bull:jobs:x", "1", 0).Err(), "NOPERM")
}
