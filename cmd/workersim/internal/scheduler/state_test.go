package scheduler

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/api"
)

func newState(drop ...string) *State {
	d := map[string]bool{}
	for _, w := range drop {
		d[w] = true
	}
	return New(Config{
		Seed: 3, RunMemory: 1 << 20, RunDuration: time.Second, MaxPending: 5,
		ClaimTimeout: 10 * time.Second, LostTimeout: 5 * time.Minute, DropClaims: d, DropEvery: 2,
	})
}

func names(events []Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Name+" "+e.WorkerID+" "+e.RunID)
	}
	return out
}

func TestSeededRunsAreRepeatable(t *testing.T) {
	a, b := newState(), newState()
	for range 3 {
		a.Enqueue()
		b.Enqueue()
	}
	ra, _, _ := a.Claim("w", 3, time.Now())
	rb, _, _ := b.Claim("w", 3, time.Now())
	assert.Equal(t, ra, rb)
	assert.Equal(t, "run-3-00001", ra[0].ID)
}

func TestMaxPending(t *testing.T) {
	s := newState()
	for range 10 {
		s.Enqueue()
	}
	p, _ := s.Counts()
	assert.Equal(t, 5, p)
}

func TestClaimStartComplete(t *testing.T) {
	s := newState()
	s.Enqueue()
	now := time.Now()
	runs, drop, ev := s.Claim("w1", 2, now)
	require.Len(t, runs, 1)
	assert.False(t, drop)
	assert.Equal(t, []string{contract.EventClaimed + " w1 " + runs[0].ID}, names(ev))
	assert.False(t, s.Start("w2", runs[0].ID, now), "another worker cannot start it")
	assert.True(t, s.Start("w1", runs[0].ID, now))
	_, held := s.Counts()
	assert.Equal(t, map[string]int{"w1": 1}, held)
	ok, ev := s.Complete("w1", runs[0].ID, "success", "")
	assert.True(t, ok)
	assert.Equal(t, []string{contract.EventFinished + " w1 " + runs[0].ID}, names(ev))
	_, held = s.Counts()
	assert.Equal(t, map[string]int{"w1": 0}, held, "a worker seen once keeps reporting 0")
}

func TestUnacknowledgedClaimRollsBackThenOrphanIsRefused(t *testing.T) {
	s := newState()
	s.Enqueue()
	s.Enqueue()
	now := time.Now()
	runs, _, _ := s.Claim("w1", 2, now)
	require.Len(t, runs, 2)
	assert.Empty(t, s.Expire(now.Add(9*time.Second)))
	ev := s.Expire(now.Add(11 * time.Second))
	require.Len(t, ev, 2)
	assert.Equal(t, contract.EventReleased, ev[0].Name)
	assert.Equal(t, "claim_timeout", ev[0].Attrs[0].Value.AsString())
	// Requeued in their original order.
	again, _, _ := s.Claim("w2", 2, now)
	assert.Equal(t, runs, again)
	// The late worker's ack and completion are refused: it is an orphan.
	assert.False(t, s.Start("w1", runs[0].ID, now))
	ok, _ := s.Complete("w1", runs[0].ID, "success", "")
	assert.False(t, ok)
}

func TestDroppedClaimsStayHeldUntilLostTimeout(t *testing.T) {
	s := newState("w1")
	for range 4 {
		s.Enqueue()
	}
	now := time.Now()
	_, drop1, _ := s.Claim("w1", 1, now)
	_, drop2, _ := s.Claim("w1", 1, now)
	assert.False(t, drop1)
	assert.True(t, drop2, "every 2nd claim is dropped")
	// The first (delivered, never acked) rolls back at the claim timeout;
	// the dropped one stays held: visible drift.
	ev := s.Expire(now.Add(11 * time.Second))
	require.Len(t, ev, 1)
	_, held := s.Counts()
	assert.Equal(t, 1, held["w1"])
	ev = s.Expire(now.Add(6 * time.Minute))
	require.Len(t, ev, 1)
	assert.Equal(t, "lost", ev[0].Attrs[0].Value.AsString())
}

func TestHTTPDroppedResponse(t *testing.T) {
	s := newState("w1")
	for range 4 {
		s.Enqueue()
	}
	var (
		mu  sync.Mutex // handlers run on the server's goroutines
		got []Event
	)
	srv := httptest.NewServer(Handler(s, func(e []Event) {
		mu.Lock()
		got = append(got, e...)
		mu.Unlock()
	}))
	defer srv.Close()
	c := api.NewClient(srv.URL)
	ctx := context.Background()

	runs, err := c.Claim(ctx, "w1", 1)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.NoError(t, c.Start(ctx, "w1", runs[0].ID))
	require.NoError(t, c.Complete(ctx, "w1", runs[0].ID, "success", ""))
	require.ErrorIs(t, c.Complete(ctx, "w1", runs[0].ID, "success", ""), api.ErrNotHeld)

	_, err = c.Claim(ctx, "w1", 1)
	require.Error(t, err, "2nd claim's response is dropped")
	_, held := s.Counts()
	assert.Equal(t, 1, held["w1"], "but the scheduler counts it as held")
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, got, 3) // claimed, finished, claimed
}
