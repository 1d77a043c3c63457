package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// kombu's Redis transport keeps a queue's priority levels in lists named
// queue + "\x06\x16" + level (PRIORITY_STEPS 0, 3, 6, 9; level 0 is the
// queue's own name).
var redisPrioritySuffixes = []string{"", "\x06\x163", "\x06\x166", "\x06\x169"}

// redisTransport reads Celery's events from Redis pub/sub: kombu publishes
// a fanout exchange to the channel "/<db>.<exchange>/<routing key>"
// (keyprefix_fanout "/{db}.", fanout_patterns on): PSUBSCRIBE
// "/<db>.celeryev/*" receives every event. It never publishes.
type redisTransport struct {
	r       *celeryReceiver
	client  *redis.Client
	pattern string
}

// newRedisClient is a client of the broker or the result backend: it fails
// fast (5 s to dial or read, no retries: the receiver retries itself) and
// holds two connections at most.
func newRedisClient(opts *redis.Options, name string) *redis.Client {
	opts.ClientName = name
	opts.DialTimeout = 5 * time.Second
	opts.ReadTimeout = 5 * time.Second
	opts.MaxRetries = 0
	opts.PoolSize = 2
	return redis.NewClient(opts)
}

// quietRedis drops go-redis's own log lines (its pool's dial failures):
// the receiver reports the broker's state itself, once per change.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

var quietOnce sync.Once

func newRedis(r *celeryReceiver) (*redisTransport, error) {
	quietOnce.Do(func() { redis.SetLogger(quietRedis{}) })
	opts, err := redis.ParseURL(r.cfg.Broker)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if r.cfg.Username != "" {
		opts.Username = r.cfg.Username
	}
	if r.cfg.Password != "" {
		opts.Password = string(r.cfg.Password)
	}
	if r.broker.tls {
		tlsCfg, err := r.cfg.TLS.LoadTLSConfig(context.Background())
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		if tlsCfg != nil {
			opts.TLSConfig = tlsCfg
		}
	}
	return &redisTransport{
		r: r, client: newRedisClient(opts, "workerwatch-celery"),
		pattern: "/" + strconv.Itoa(r.broker.db) + "." + r.cfg.EventExchange + "/*",
	}, nil
}

// consume reads the event channel until an error.
func (t *redisTransport) consume(ctx context.Context) error {
	// A PING first: a wrong password or an unreachable server is an error
	// here, where go-redis's pub/sub would retry it silently.
	if err := t.client.Ping(ctx).Err(); err != nil {
		return err
	}
	ps := t.client.PSubscribe(ctx, t.pattern)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		return err
	}
	t.r.brokerState(nil)
	for {
		msg, err := ps.ReceiveTimeout(ctx, 30*time.Second)
		if err != nil {
			var nerr interface{ Timeout() bool }
			if errors.As(err, &nerr) && nerr.Timeout() {
				// Quiet: check the connection and go on.
				if err := ps.Ping(ctx); err != nil {
					return err
				}
				continue
			}
			return err
		}
		switch m := msg.(type) {
		case *redis.Message:
			t.r.handleEnvelope([]byte(m.Payload))
		case *redis.Pong, *redis.Subscription:
		}
	}
}

// queueLengths: LLEN of each queue's lists, in one round trip.
func (t *redisTransport) queueLengths(ctx context.Context, queues []string) (map[string]int64, error) {
	pipe := t.client.Pipeline()
	cmds := make([][]*redis.IntCmd, len(queues))
	for i, q := range queues {
		for _, s := range redisPrioritySuffixes {
			cmds[i] = append(cmds[i], pipe.LLen(ctx, q+s))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(queues))
	for i, q := range queues {
		var n int64
		for _, c := range cmds[i] {
			n += c.Val()
		}
		out[q] = n
	}
	return out, nil
}

func (t *redisTransport) close() error { return t.client.Close() }
