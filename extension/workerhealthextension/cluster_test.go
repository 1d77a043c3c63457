package workerhealthextension

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configoptional"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/cluster"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/internal/ring"
)

// tier is three shards with static membership on loopback.
type tier struct {
	shards []*workerHealth
	names  []string
	bases  []string
	ring   *ring.Ring
}

func newTier(t *testing.T, settle time.Duration) *tier {
	t.Helper()
	tr := &tier{}
	var members []cluster.StaticMember
	for i := range 3 {
		api := freeport.Addr(t)
		name := fmt.Sprintf("shard-%c.gateway:4317", 'a'+i)
		members = append(members, cluster.StaticMember{Endpoint: name, API: api})
		tr.names = append(tr.names, name)
	}
	for i := range 3 {
		wh := newTestExt(t, func(c *Config) {
			c.NetAddr.Endpoint = members[i].API
			c.Cluster.Self = members[i].Endpoint
			c.Cluster.Static = configoptional.Some(cluster.StaticMembers{Members: members})
			c.Cluster.Settle = settle
			c.Cluster.ListCache = 0
			// The shards read each other's fleet figures this often: the
			// pending figure below is waited for.
			c.Cluster.SyncInterval = 50 * time.Millisecond
		})
		tr.shards = append(tr.shards, wh)
		tr.bases = append(tr.bases, startTestExt(t, wh))
	}
	tr.ring = ring.New(tr.names)
	return tr
}

func (tr *tier) shardOf(id string) int {
	o := tr.ring.Owner(id)
	for i, n := range tr.names {
		if n == o {
			return i
		}
	}
	return -1
}

// publishAndWait publishes snap to wh and waits until its view serves it.
func publishAndWait(t *testing.T, wh *workerHealth, snap *contract.Snapshot) {
	t.Helper()
	wh.Publish(snap)
	require.Eventually(t, func() bool { return !wh.store.Load().Time.Before(snap.Time) }, 5*time.Second, time.Millisecond)
}

func TestClusterAnswersForEveryWorkerFromAnyShard(t *testing.T) {
	tr := newTier(t, 0)
	// 60 workers, each published by its owner only; states by id.
	states := map[string]contract.State{}
	per := make([][]contract.Worker, 3)
	for i := range 60 {
		id := fmt.Sprintf("worker-%d", i)
		st := contract.AllStates[i%len(contract.AllStates)]
		states[id] = st
		s := tr.shardOf(id)
		per[s] = append(per[s], worker(id, st))
	}
	for s := range 3 {
		require.NotEmpty(t, per[s], "the ring spreads 60 workers over 3 shards")
		snap := snapshot(testSource, t0.Add(time.Duration(s)*time.Second), per[s]...)
		snap.Fleet.IdleCapacity = int64(10 * (s + 1))
		if s == 1 {
			snap.Fleet.Pending = 7 // the one shard the scheduler's gauge reaches
		}
		publishAndWait(t, tr.shards[s], snap)
	}

	for s, base := range tr.bases {
		for id, st := range states {
			resp, err := http.Get(workerURL(base, id))
			require.NoError(t, err)
			var w contract.Worker
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&w))
			resp.Body.Close()
			want := http.StatusServiceUnavailable
			if st.MayTakeWork() {
				want = http.StatusOK
			}
			assert.Equal(t, want, resp.StatusCode, "shard %d asked for %s", s, id)
			assert.Equal(t, st, w.State, "shard %d asked for %s", s, id)
			assert.Equal(t, tr.names[tr.shardOf(id)], resp.Header.Get(contract.HeaderShard), "the owner's verdict")
		}
		code, _ := get(t, workerURL(base, "no-such-worker"))
		assert.Equal(t, http.StatusNotFound, code, "an unknown id is 404 in steady state")

		// A worker's history and page come from its owner too.
		for _, id := range []string{"worker-1", "worker-2", "worker-3"} {
			for _, path := range []string{workerURL(base, id) + "/history", base + "/workers/" + id} {
				resp, err := http.Get(path)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode, "shard %d: %s", s, path)
				assert.Equal(t, tr.names[tr.shardOf(id)], resp.Header.Get(contract.HeaderShard), "shard %d: %s", s, path)
			}
		}

		// The whole fleet from any shard, figures added up once.
		var list struct {
			Count   int                `json:"count"`
			Fleet   contract.Fleet     `json:"fleet"`
			Workers []contract.Worker  `json:"workers"`
			Sources []store.SourceInfo `json:"sources"`
		}
		code, body := get(t, base+"/health/workers")
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal([]byte(body), &list))
		assert.Equal(t, 60, list.Count)
		require.Len(t, list.Workers, 60)
		for _, w := range list.Workers {
			assert.Equal(t, states[w.ID], w.State)
		}
		assert.Equal(t, int64(7), list.Fleet.Pending, "pending counted once")
		assert.Equal(t, int64(60), list.Fleet.IdleCapacity, "idle capacity summed over shards")
		assert.Equal(t, 10, list.Fleet.ByState[contract.Healthy])
		assert.Len(t, list.Sources, 3)

		var fleet cluster.FleetBody
		code, body = get(t, base+"/health/fleet")
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal([]byte(body), &fleet))
		assert.Equal(t, list.Fleet, fleet.Fleet)

		// ?scope=local is this shard's own.
		code, body = get(t, base+"/health/workers?scope=local")
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal([]byte(body), &list))
		assert.Equal(t, len(per[s]), list.Count)

		// The page shows the whole fleet.
		code, body = get(t, base+"/")
		require.Equal(t, http.StatusOK, code)
		for id := range states {
			assert.Contains(t, body, ">"+id+"<", "the page of shard %d lists %s", s, id)
		}
	}

	// What the processors read: ownership and the pending figure.
	for id := range states {
		for s, wh := range tr.shards {
			assert.Equal(t, s == tr.shardOf(id), wh.Owns(id))
		}
	}
	require.Eventually(t, func() bool {
		p, _, ok := tr.shards[0].ClusterPending()
		return ok && p == 7
	}, 5*time.Second, 10*time.Millisecond)
	_, _, ok := tr.shards[1].ClusterPending()
	assert.False(t, ok, "the shard that has the figure does not get it back from the others")
}

func TestClusterMovingAndUnreachable(t *testing.T) {
	tr := newTier(t, time.Hour) // the whole test is within the settle window
	id := ""
	for i := 0; id == ""; i++ {
		if c := fmt.Sprintf("w-%d", i); tr.shardOf(c) == 2 {
			id = c
		}
	}
	// A former owner (shard 0) still lists the worker; its owner does not yet.
	publishAndWait(t, tr.shards[0], snapshot(testSource, t0, worker(id, contract.Healthy)))
	for s, base := range tr.bases {
		resp, err := http.Get(workerURL(base, id))
		require.NoError(t, err)
		var w contract.Worker
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&w))
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "shard %d", s)
		assert.Equal(t, contract.Unknown, w.State)
		require.NotEmpty(t, w.Reasons)
		assert.Equal(t, contract.ReasonMoving, w.Reasons[0].Code)
	}
	var list struct {
		Workers []contract.Worker `json:"workers"`
	}
	code, body := get(t, tr.bases[1]+"/health/workers")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Workers, 1, "listed once")
	assert.Equal(t, contract.Unknown, list.Workers[0].State)
	assert.Equal(t, contract.ReasonMoving, list.Workers[0].Reasons[0].Code)
	assert.Contains(t, list.Workers[0].Reasons[0].Message, "last judged healthy")

	// Once the owner has it, its verdict, and the former owner's copy is
	// not listed twice.
	publishAndWait(t, tr.shards[2], snapshot(testSource, t0, worker(id, contract.Degraded)))
	code, body = get(t, tr.bases[1]+"/health/workers")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Workers, 1)
	assert.Equal(t, contract.Degraded, list.Workers[0].State)
	code, _ = get(t, workerURL(tr.bases[0], id))
	assert.Equal(t, http.StatusOK, code)

	// The owner goes down (still in the static ring): 503 owner_unreachable,
	// and the list says which shard is missing.
	require.NoError(t, tr.shards[2].Shutdown(context.Background()))
	resp, err := http.Get(workerURL(tr.bases[0], id))
	require.NoError(t, err)
	var w contract.Worker
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&w))
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, contract.ReasonOwnerUnreachable, w.Reasons[0].Code)
	assert.Equal(t, tr.names[2], resp.Header.Get(contract.HeaderShard))
	code, body = get(t, tr.bases[0]+"/health/workers")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"error":`)
	assert.Contains(t, body, tr.names[2])
}

// TestClusterStaleAskerGetsMoving: during a ring change the shard asked
// may still have the old ring for a moment (each resolves every
// sync_interval) and ask the former owner, which already has the new ring
// and has handed the worker over. The former owner must say `moving`, not
// 404: the asker, settled on its old ring, would pass a 404 on, and a
// scheduler reads 404 as "no such worker".
func TestClusterStaleAskerGetsMoving(t *testing.T) {
	var all []cluster.StaticMember
	for i := range 3 {
		api := freeport.Addr(t)
		all = append(all, cluster.StaticMember{Endpoint: fmt.Sprintf("shard-%c.gateway:4317", 'a'+i), API: api})
	}
	oldRing := ring.New([]string{all[0].Endpoint, all[1].Endpoint})
	nextRing := ring.New([]string{all[0].Endpoint, all[1].Endpoint, all[2].Endpoint})
	id := ""
	for i := 0; id == ""; i++ {
		if c := fmt.Sprintf("w-%d", i); oldRing.Owner(c) == all[1].Endpoint && nextRing.Owner(c) == all[2].Endpoint {
			id = c
		}
	}
	shard := func(i int, members []cluster.StaticMember, settle time.Duration) string {
		wh := newTestExt(t, func(c *Config) {
			c.NetAddr.Endpoint = all[i].API
			c.Cluster.Self = all[i].Endpoint
			c.Cluster.Static = configoptional.Some(cluster.StaticMembers{Members: members})
			c.Cluster.Settle = settle
			c.Cluster.ListCache = 0
		})
		return startTestExt(t, wh)
	}
	asker := shard(0, all[:2], 0)     // the old ring, settled
	_ = shard(1, all, time.Hour)      // the former owner: the new ring, just changed
	owner := shard(2, all, time.Hour) // the new owner has not judged it yet either
	resp, err := http.Get(workerURL(asker, id))
	require.NoError(t, err)
	var w contract.Worker
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&w))
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "not 404 while the ring changes")
	assert.Equal(t, contract.Unknown, w.State)
	require.NotEmpty(t, w.Reasons)
	assert.Equal(t, contract.ReasonMoving, w.Reasons[0].Code)
	assert.Equal(t, all[1].Endpoint, resp.Header.Get(contract.HeaderShard))

	_ = owner
}
