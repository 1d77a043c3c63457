package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestStartStopStartOn: a started server answers; stopped, it does not;
// started again on its port, it answers there; with --requirepass Start
// returns once it refuses an unauthenticated client (NOAUTH).
func TestStartStopStartOn(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	require.NoError(t, c.Ping(ctx).Err())
	s.Stop()
	require.Error(t, c.Ping(ctx).Err())
	s.Stop()
	again := StartOn(t, s.Port)
	require.Equal(t, s.Addr, again.Addr)
	require.NoError(t, c.Ping(ctx).Err())

	p := Start(t, "--requirepass", "secret")
	pc := redis.NewClient(&redis.Options{Addr: p.Addr, Password: "secret"})
	defer pc.Close()
	require.NoError(t, pc.Ping(ctx).Err())
}
