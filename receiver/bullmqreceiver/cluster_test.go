package bullmqreceiver

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/internal/redistest"
)

// startCluster starts a Redis Cluster of three masters (real redis-server
// processes, each stopped by its pid when the test ends), forms it with
// redis-cli --cluster create and waits until every node says
// cluster_state:ok. It returns the nodes' addresses.
func startCluster(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	var addrs []string
	for i := 1; i <= 3; i++ {
		srv := redistest.Start(t, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)),
			"--cluster-port", strconv.Itoa(freeport.Port(t)))
		addrs = append(addrs, srv.Addr)
	}
	cli, err := exec.LookPath("redis-cli")
	require.NoError(t, err, "redis-cli (package redis-tools) forms the cluster")
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	ctx := context.Background()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		eventually(t, 30*time.Second, "cluster_state:ok on "+a, func() error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s", strings.SplitN(info, "\n", 2)[0])
			}
			return nil
		})
		require.NoError(t, c.Close())
	}
	return addrs
}

// TestReceiverCluster: with cluster.enabled the receiver reads BullMQ's
// state on a real Redis Cluster of three masters (a hash-tagged prefix puts
// a queue's keys on one node, as BullMQ requires): the same snapshots per
// worker, run starts and ends, stall and counts as on a single node, with
// the workers' named connections on different nodes (CLIENT LIST is read
// on every node), and queues found by prefix (SCAN on every master).
func TestReceiverCluster(t *testing.T) {
	addrs := startCluster(t)
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	const prefix = "{bull}"
	b := &bull{c: cc, prefix: prefix, queue: "jobs"}
	b.add(ctx, t, "0")

	// The node that serves the {bull} slot, and the others.
	slot, err := cc.ClusterKeySlot(ctx, b.key("meta")).Result()
	require.NoError(t, err)
	shards, err := cc.ClusterShards(ctx).Result()
	require.NoError(t, err)
	// masterOf is the address of the master serving a slot.
	masterOf := func(slot int64) string {
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start > slot || slot > r.End {
					continue
				}
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
					}
				}
			}
		}
		return ""
	}
	home := masterOf(slot)
	require.Contains(t, addrs, home)
	require.NotEmpty(t, home)
	var away []string
	for _, a := range addrs {
		if a != home {
			away = append(away, a)
		}
	}
	require.Len(t, away, 2)
	// Workers' connections on nodes other than the queue's: BullMQ's
	// Worker may hold its blocking connection on any node.
	b.connectWorker(t, away[0], "w1")
	b.connectWorker(t, away[1], "w2")
	b.connectWorker(t, home, "idle")

	cfg := testConfig(addrs[0])
	cfg.Prefix = prefix
	cfg.Queues = []string{"jobs"}
	cfg.Cluster.Enabled = true
	cfg.Cluster.Addresses = addrs[1:]
	h := startReceiver(t, cfg, nil)
	h.polled()

	checkLifecycle(ctx, t, h, b, 20*time.Second)

	// Discovery: with no queues listed, every queue under the prefix on
	// every master (SCAN on each). BullMQ's other cluster layout, a plain
	// prefix and the queue's name hash-tagged, spreads queues over the
	// nodes: one queue per master.
	nodeOf := func(key string) string {
		s, err := cc.ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err)
		return masterOf(s)
	}
	spread := map[string]string{} // node: queue
	for i := 0; len(spread) < len(addrs) && i < 100; i++ {
		q := fmt.Sprintf("{q%d}", i)
		d := &bull{c: cc, prefix: "bull", queue: q}
		if n := nodeOf(d.key("meta")); spread[n] == "" {
			spread[n] = q
			d.add(ctx, t, "1")
			d.activate(ctx, t, "1", "w-"+q)
		}
	}
	require.Len(t, spread, len(addrs), "a queue on every master")
	dcfg := testConfig(addrs[2])
	dcfg.Cluster.Enabled = true
	dh := startReceiver(t, dcfg, nil)
	eventually(t, 20*time.Second, "a queue on every master found and read", func() error {
		rs := records(dh.logs)
		for n, q := range spread {
			if got, _ := lastSnapshot(rs, q, "w-"+q); !slices.Equal(got, []string{"1"}) {
				return fmt.Errorf("queue %s on %s: %v (status %v)", q, n, got, dh.host.last())
			}
		}
		return nil
	})
}
