package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadata"
)

// Config of the celery receiver. Every key is documented in README.md.
type Config struct {
	metadata.MetricsBuilderConfig `mapstructure:",squash"`

	// Broker is Celery's broker URL: redis://[:password@]host:port[/db],
	// rediss:// (TLS), amqp://[user:password@]host:port[/vhost] or amqps://
	// (TLS). Required.
	Broker string `mapstructure:"broker"`
	// Username and Password override the URL's credentials (keep secrets
	// out of the URL with ${env:...}).
	Username string              `mapstructure:"username"`
	Password configopaque.String `mapstructure:"password"`
	// TLS is used with rediss:// and amqps:// (CA, client certificate,
	// server name); it must stay empty with redis:// and amqp://.
	TLS configtls.ClientConfig `mapstructure:"tls"`
	// Queues are the Celery queues whose lengths are read every
	// collection_interval. Default [celery] (Celery's default queue).
	Queues []string `mapstructure:"queues"`
	// EventExchange is Celery's event_exchange setting. Default celeryev.
	EventExchange string `mapstructure:"event_exchange"`
	// CollectionInterval is how often the metrics are emitted and the queue
	// lengths read. Default 5s.
	CollectionInterval time.Duration `mapstructure:"collection_interval"`
	// HeartbeatGrace: a worker is offline (celery.worker.online 0) when its
	// latest event is older than heartbeat_grace x its heartbeat interval
	// (freq, 2 s by default in Celery). Default 2 (Flower's rule).
	HeartbeatGrace float64 `mapstructure:"heartbeat_grace"`
	// Capacity is the workers' pool size, which Celery's events do not
	// carry (Flower asks the workers with a broadcast; this receiver sends
	// none).
	Capacity CapacityConfig `mapstructure:"capacity"`
	// EventQueue (RabbitMQ only) names the receiver's event queue: a named
	// queue outlives the receiver's connection, so the events published
	// while the collector restarts wait there (bounded by
	// event_queue_expires and event_queue_max_length). Empty (default): an
	// exclusive, auto-delete queue named by the server, which keeps nothing
	// while the collector is down. Use one name per collector.
	EventQueue string `mapstructure:"event_queue"`
	// EventQueueExpires: RabbitMQ deletes the named queue after this long
	// without a consumer (x-expires). Default 1h.
	EventQueueExpires time.Duration `mapstructure:"event_queue_expires"`
	// EventQueueMaxLength bounds the events the named queue keeps (the
	// oldest are dropped past it, x-max-length). Default 100000.
	EventQueueMaxLength int `mapstructure:"event_queue_max_length"`
	// ReconnectInterval is the wait between two connection attempts to the
	// broker. Default 5s.
	ReconnectInterval time.Duration `mapstructure:"reconnect_interval"`
	// MaxTrackedTasks bounds the task ids held in memory (tasks started and
	// not ended, across workers); past it the oldest is forgotten. Default
	// 100000.
	MaxTrackedTasks int `mapstructure:"max_tracked_tasks"`
	// ResultBackend is Celery's Redis result backend URL (redis:// or
	// rediss://, Celery's result_backend setting), read only: after each
	// (re)connection to the broker the receiver reads the results stored
	// there (celery-task-meta-<task id>) and ends the runs whose end events
	// it missed while it was disconnected or down. Empty (default): off.
	ResultBackend string `mapstructure:"result_backend"`
	// ResultScanLimit bounds the result keys read per catch-up. Default
	// 100000.
	ResultScanLimit int `mapstructure:"result_scan_limit"`
	// StorageID is a storage extension (file_storage) that keeps, across
	// collector restarts, the time of the latest event and the runs started
	// and not ended. Used only with result_backend (ignored without it);
	// without storage a catch-up covers broker reconnections, not a
	// collector restart.
	StorageID *component.ID `mapstructure:"storage"`
}

// CapacityConfig: the pool size of the workers.
type CapacityConfig struct {
	// Concurrency is every worker's pool size (celery worker -c / --concurrency,
	// worker_concurrency). 0: unknown (no capacity is sent).
	Concurrency int `mapstructure:"concurrency"`
	// PerWorker overrides it per worker hostname (e.g. w1@host: 8).
	PerWorker map[string]int `mapstructure:"per_worker"`
}

var _ component.Config = (*Config)(nil)

// brokerKind is the transport of a broker URL.
type brokerKind int

const (
	brokerRedis brokerKind = iota
	brokerAMQP
)

// parsedBroker is Broker, checked.
type parsedBroker struct {
	kind brokerKind
	tls  bool
	u    *url.URL
	db   int // Redis database
}

func (cfg *Config) parseBroker() (parsedBroker, error) {
	var p parsedBroker
	if cfg.Broker == "" {
		return p, errors.New("broker: required (redis://host:6379/0 or amqp://host:5672//)")
	}
	u, err := url.Parse(cfg.Broker)
	if err != nil {
		return p, fmt.Errorf("broker: %w", err)
	}
	p.u = u
	switch u.Scheme {
	case "redis":
	case "rediss":
		p.tls = true
	case "amqp", "pyamqp":
		p.kind = brokerAMQP
	case "amqps":
		p.kind, p.tls = brokerAMQP, true
	default:
		return p, fmt.Errorf("broker: scheme %q is not supported: use redis://, rediss://, amqp:// or amqps://", u.Scheme)
	}
	if u.Hostname() == "" {
		return p, fmt.Errorf("broker: %q has no host", u.Redacted())
	}
	if p.kind == brokerRedis {
		if db := strings.Trim(u.Path, "/"); db != "" {
			n, err := strconv.Atoi(db)
			if err != nil || n < 0 {
				return p, fmt.Errorf("broker: the Redis database %q is not a number", db)
			}
			p.db = n
		}
	}
	return p, nil
}

// Validate checks the configuration; every error names its key.
func (cfg *Config) Validate() error {
	var errs []error
	p, err := cfg.parseBroker()
	if err != nil {
		errs = append(errs, err)
	} else if !p.tls && !reflect.DeepEqual(cfg.TLS, configtls.ClientConfig{}) {
		errs = append(errs, fmt.Errorf("tls: set, but broker %q is not a TLS URL: use rediss:// or amqps://", p.u.Redacted()))
	}
	for i, q := range cfg.Queues {
		if q == "" {
			errs = append(errs, fmt.Errorf("queues[%d]: must not be empty", i))
		}
	}
	if cfg.EventExchange == "" {
		errs = append(errs, errors.New("event_exchange: must not be empty (Celery's default is celeryev)"))
	}
	if cfg.CollectionInterval <= 0 {
		errs = append(errs, fmt.Errorf("collection_interval: must be positive, got %s", cfg.CollectionInterval))
	}
	if cfg.HeartbeatGrace < 1 {
		errs = append(errs, fmt.Errorf("heartbeat_grace: must be at least 1 (times the heartbeat interval), got %g", cfg.HeartbeatGrace))
	}
	if cfg.Capacity.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("capacity.concurrency: must not be negative, got %d", cfg.Capacity.Concurrency))
	}
	for h, n := range cfg.Capacity.PerWorker {
		if n < 0 {
			errs = append(errs, fmt.Errorf("capacity.per_worker.%s: must not be negative, got %d", h, n))
		}
	}
	if cfg.EventQueue != "" && err == nil && p.kind != brokerAMQP {
		errs = append(errs, errors.New("event_queue: only for an amqp:// or amqps:// broker (Redis pub/sub keeps no events)"))
	}
	if cfg.EventQueueExpires < time.Second {
		errs = append(errs, fmt.Errorf("event_queue_expires: must be at least 1s, got %s", cfg.EventQueueExpires))
	}
	if cfg.EventQueueMaxLength < 1 {
		errs = append(errs, fmt.Errorf("event_queue_max_length: must be positive, got %d", cfg.EventQueueMaxLength))
	}
	if cfg.ReconnectInterval <= 0 {
		errs = append(errs, fmt.Errorf("reconnect_interval: must be positive, got %s", cfg.ReconnectInterval))
	}
	if cfg.ResultBackend != "" {
		if u, err := url.Parse(cfg.ResultBackend); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			errs = append(errs, errors.New("result_backend: must be a redis:// or rediss:// URL (Celery's Redis result backend)"))
		} else if _, err := redis.ParseURL(cfg.ResultBackend); err != nil {
			errs = append(errs, fmt.Errorf("result_backend: %w", err))
		}
	}
	if cfg.ResultScanLimit < 1 {
		errs = append(errs, fmt.Errorf("result_scan_limit: must be positive, got %d", cfg.ResultScanLimit))
	}
	if cfg.MaxTrackedTasks < 1 {
		errs = append(errs, fmt.Errorf("max_tracked_tasks: must be positive, got %d", cfg.MaxTrackedTasks))
	}
	return errors.Join(errs...)
}

// capacity is a worker's pool size, 0 when unknown.
func (cfg *Config) capacity(hostname string) int {
	if n, ok := cfg.Capacity.PerWorker[hostname]; ok {
		return n
	}
	return cfg.Capacity.Concurrency
}
