package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpTransport reads Celery's events from RabbitMQ: an exclusive,
// auto-delete queue of its own bound to the "celeryev" topic exchange with
// "#" (every event), consumed with automatic acks. It declares nothing
// else, publishes nothing, and reads queue lengths with passive declares
// (which create nothing).
type amqpTransport struct {
	r   *celeryReceiver
	url string
	cfg amqp.Config

	mu   sync.Mutex
	conn *amqp.Connection
}

// errNoExchange: the event exchange does not exist yet.
var errNoExchange = errors.New("event exchange not found")

func newAMQP(r *celeryReceiver) (*amqpTransport, error) {
	u := *r.broker.u
	if u.Scheme == "pyamqp" {
		u.Scheme = "amqp"
	}
	if r.cfg.Username != "" || r.cfg.Password != "" {
		name := r.cfg.Username
		if name == "" && u.User != nil {
			name = u.User.Username()
		}
		u.User = url.UserPassword(name, string(r.cfg.Password))
	}
	// Celery's default vhost is "/", written "amqp://host//" or "amqp://host/".
	if u.Path == "" {
		u.Path = "/"
	}
	cfg := amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Properties: amqp.Table{"connection_name": "workerwatch-celery"}}
	cfg.Dial = amqp.DefaultDial(5 * time.Second)
	if r.broker.tls {
		tlsCfg, err := r.cfg.TLS.LoadTLSConfig(context.Background())
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		if tlsCfg == nil {
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		cfg.TLSClientConfig = tlsCfg
	}
	return &amqpTransport{r: r, url: u.String(), cfg: cfg}, nil
}

func (t *amqpTransport) connection() (*amqp.Connection, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn != nil && !t.conn.IsClosed() {
		return t.conn, nil
	}
	c, err := amqp.DialConfig(t.url, t.cfg)
	if err != nil {
		return nil, err
	}
	t.conn = c
	return c, nil
}

func (t *amqpTransport) consume(ctx context.Context) error {
	conn, err := t.connection()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	// The exchange exists once a worker with -E has run; until then the
	// bind fails and is retried.
	if err := ch.ExchangeDeclarePassive(t.r.cfg.EventExchange, "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("%w: %q (no worker with -E has declared it yet): %w", errNoExchange, t.r.cfg.EventExchange, err)
	}
	var q amqp.Queue
	if name := t.r.cfg.EventQueue; name != "" {
		// Named, not exclusive, not auto-deleted: it keeps the events while
		// the collector restarts; RabbitMQ drops it after
		// event_queue_expires without a consumer.
		q, err = ch.QueueDeclare(name, false, false, false, false, amqp.Table{
			"x-expires":    t.r.cfg.EventQueueExpires.Milliseconds(),
			"x-max-length": int64(t.r.cfg.EventQueueMaxLength),
		})
	} else {
		q, err = ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-message-ttl": int32(60000)})
	}
	if err != nil {
		return err
	}
	if err := ch.QueueBind(q.Name, "#", t.r.cfg.EventExchange, false, nil); err != nil {
		return err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, q.Name, "workerwatch-celery", true, false, false, false, nil)
	if err != nil {
		return err
	}
	t.r.brokerState(nil)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			if e == nil {
				return errors.New("channel closed")
			}
			return e
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("event consumer closed")
			}
			t.r.handleBody(d.Body)
		}
	}
}

// queueLengths: a passive declare per queue (its message count); a missing
// queue closes the channel, so each queue gets its own.
func (t *amqpTransport) queueLengths(_ context.Context, queues []string) (map[string]int64, error) {
	conn, err := t.connection()
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(queues))
	var errs []error
	for _, name := range queues {
		ch, err := conn.Channel()
		if err != nil {
			return out, err
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %q: %w", name, err))
			continue
		}
		out[name] = int64(q.Messages)
		_ = ch.Close()
	}
	return out, errors.Join(errs...)
}

func (t *amqpTransport) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn != nil {
		return t.conn.Close()
	}
	return nil
}
