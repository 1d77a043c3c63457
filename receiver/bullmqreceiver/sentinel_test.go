package bullmqreceiver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/internal/redistest"
)

// TestReceiverSentinel: with sentinel.master_name the receiver asks a real
// Redis Sentinel (redis-server --sentinel) where the master is and reads
// BullMQ's state there.
func TestReceiverSentinel(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	port := freeport.Port(t)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor bullmaster 127.0.0.1 %d 1\n", port, srv.Port)), 0o600))
	redistest.Exec(t, conf, "--sentinel")
	sentinel := "127.0.0.1:" + strconv.Itoa(port)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	eventually(t, 20*time.Second, "sentinel knows the master", func() error {
		return sc.GetMasterAddrByName(ctx, "bullmaster").Err()
	})

	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	b := &bull{c: c, prefix: "bull", queue: "jobs"}
	b.add(ctx, t, "1")
	cfg := testConfig("", "jobs")
	cfg.Sentinel.MasterName = "bullmaster"
	cfg.Sentinel.Addresses = []string{sentinel}
	h := startReceiver(t, cfg, nil)
	h.polled()
	b.activate(ctx, t, "1", "w1")
	eventually(t, 10*time.Second, "job 1 read through Sentinel", func() error {
		if got, _ := lastSnapshot(records(h.logs), "jobs", "w1"); !slices.Equal(got, []string{"1"}) {
			return fmt.Errorf("w1: %v (status %v)", got, h.host.last())
		}
		return nil
	})
}
