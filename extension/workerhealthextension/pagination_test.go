package workerhealthextension

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// pagedBody is a list answer with its cursor.
type pagedBody struct {
	listBody
	Next *string `json:"next"`
}

// walkPages reads base+"/health/workers?"+query a page of `limit` at a time,
// following next, and returns every id in order and the pages' sizes.
func walkPages(t *testing.T, base, query string, limit int) ([]string, []int) {
	t.Helper()
	var all []string
	var sizes []int
	after := ""
	for range 1000 {
		q, err := url.ParseQuery(query)
		require.NoError(t, err)
		q.Set("limit", strconv.Itoa(limit))
		if after != "" {
			q.Set("after", after)
		}
		code, body := get(t, base+"/health/workers?"+q.Encode())
		require.Equal(t, http.StatusOK, code, body)
		var p pagedBody
		require.NoError(t, json.Unmarshal([]byte(body), &p))
		require.LessOrEqual(t, len(p.Workers), limit)
		assert.Equal(t, len(p.Workers), p.Count, "count is the page's")
		all = append(all, ids(p.Workers)...)
		sizes = append(sizes, len(p.Workers))
		if p.Next == nil {
			return all, sizes
		}
		require.NotEmpty(t, p.Workers, "a page with a next cursor has workers")
		require.Equal(t, p.Workers[len(p.Workers)-1].ID, *p.Next, "next is the page's last id")
		after = *p.Next
	}
	t.Fatal("pages never ended")
	return nil, nil
}

func TestWorkersListPages(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)

	var ws []contract.Worker
	states := map[string]contract.State{}
	for i := range 95 {
		id := fmt.Sprintf("w-%03d", (i*37)%95) // published out of order
		st := contract.AllStates[(i*7)%len(contract.AllStates)]
		states[id] = st
		ws = append(ws, worker(id, st))
	}
	publish(wh, snapshot(testSource, t0, ws...))

	wantIDs := func(keep ...contract.State) []string {
		var out []string
		for id, st := range states {
			if len(keep) == 0 || slices.Contains(keep, st) {
				out = append(out, id)
			}
		}
		slices.Sort(out)
		return out
	}

	for _, tc := range []struct {
		query string
		keep  []contract.State
	}{
		{"", nil},
		{"state=unhealthy", []contract.State{contract.Unhealthy}},
		{"state=unhealthy,healthy,lost", []contract.State{contract.Unhealthy, contract.Healthy, contract.Lost}},
		{"state=healthy,degraded,unhealthy,stalled,lost,unknown", contract.AllStates},
	} {
		for _, limit := range []int{1, 7, 10, 94, 95, 1000} {
			got, sizes := walkPages(t, base, tc.query, limit)
			want := wantIDs(tc.keep...)
			assert.Equal(t, want, got, "%q by %d: every worker once, in id order", tc.query, limit)
			for _, n := range sizes[:len(sizes)-1] {
				assert.Equal(t, limit, n, "%q by %d: only the last page is short", tc.query, limit)
			}
		}
	}

	// A cursor need not be a listed id: the page starts after it.
	var p pagedBody
	code, body := get(t, base+"/health/workers?limit=3&after=w-0505")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	assert.Equal(t, []string{"w-051", "w-052", "w-053"}, ids(p.Workers))
	// Fleet figures are the fleet's, not the page's.
	total := 0
	for _, n := range p.Fleet.ByState {
		total += n
	}
	assert.Equal(t, 95, total)

	// After the last id: an empty page without next.
	p = pagedBody{}
	code, body = get(t, base+"/health/workers?limit=5&after=w-094")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	assert.Empty(t, p.Workers)
	assert.NotNil(t, p.Workers, "workers is [] not null")
	assert.Nil(t, p.Next)

	// Without limit: every worker, no next (the list as before).
	p = pagedBody{}
	code, body = get(t, base+"/health/workers")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	assert.Len(t, p.Workers, 95)
	assert.Nil(t, p.Next)

	for _, bad := range []string{"limit=0", "limit=-1", "limit=x", "limit=10001", "limit=1.5"} {
		code, body := get(t, base+"/health/workers?"+bad)
		assert.Equal(t, http.StatusBadRequest, code, bad)
		assert.Contains(t, body, "limit: must be a whole number from 1 to 10000", bad)
	}
}

// TestClusterListPages: through any shard of a 3-shard tier (one hop to
// each other shard), the pages together are the tier's fleet, each worker
// once from its owner, in id order.
func TestClusterListPages(t *testing.T) {
	tr := newTier(t, 0)
	states := map[string]contract.State{}
	per := make([][]contract.Worker, 3)
	for i := range 80 {
		id := fmt.Sprintf("worker-%02d", i)
		st := contract.AllStates[i%len(contract.AllStates)]
		states[id] = st
		s := tr.shardOf(id)
		per[s] = append(per[s], worker(id, st))
	}
	for s := range 3 {
		publishAndWait(t, tr.shards[s], snapshot(testSource, t0, per[s]...))
	}
	want := make([]string, 0, len(states))
	wantUnhealthy := []string{}
	for id, st := range states {
		want = append(want, id)
		if st == contract.Unhealthy {
			wantUnhealthy = append(wantUnhealthy, id)
		}
	}
	slices.Sort(want)
	slices.Sort(wantUnhealthy)
	for s, base := range tr.bases {
		for _, limit := range []int{1, 9, 80, 500} {
			got, _ := walkPages(t, base, "", limit)
			assert.Equal(t, want, got, "shard %d by %d", s, limit)
		}
		got, _ := walkPages(t, base, "state=unhealthy", 4)
		assert.Equal(t, wantUnhealthy, got, "shard %d, unhealthy by 4", s)

		// A page's workers carry their owner's verdict, and the fleet
		// figures are the tier's.
		var p pagedBody
		code, body := get(t, base+"/health/workers?limit=10")
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal([]byte(body), &p))
		for _, w := range p.Workers {
			assert.Equal(t, states[w.ID], w.State)
		}
		total := 0
		for _, n := range p.Fleet.ByState {
			total += n
		}
		assert.Equal(t, 80, total, "shard %d: by_state over the tier", s)
		assert.Len(t, p.Sources, 3)

		// ?scope=local pages this shard's own workers only.
		got, _ = walkPages(t, base, "scope=local", 7)
		assert.Equal(t, ids(per[s]), sortedCopy(got), "shard %d local", s)
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
