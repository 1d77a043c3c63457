package bullmqreceiver // import "github.com/workerwatch/workerwatch/receiver/bullmqreceiver"

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/workerwatch/workerwatch/receiver/bullmqreceiver/internal/metadata"
)

// Config is the bullmq receiver's configuration (README.md has the table).
type Config struct {
	// Endpoint is the Redis address, host:port. With sentinel.master_name it
	// is ignored (sentinel.addresses say where the sentinels are); with
	// cluster.enabled it is one of the seed nodes.
	Endpoint string `mapstructure:"endpoint"`
	// Username and Password: Redis ACL credentials (AUTH). Empty username
	// with a password is Redis' `default` user (requirepass).
	Username string              `mapstructure:"username"`
	Password configopaque.String `mapstructure:"password"`
	// DB is the Redis logical database BullMQ uses (not with cluster).
	DB int `mapstructure:"db"`
	// TLS to Redis; off unless `tls.insecure: false` (as contrib's redis
	// receiver).
	TLS configtls.ClientConfig `mapstructure:"tls"`
	// Sentinel: Redis behind Sentinel (BullMQ's `sentinels` + `name`).
	Sentinel SentinelConfig `mapstructure:"sentinel"`
	// Cluster: Redis Cluster (BullMQ's Cluster connection; give queues a
	// hash-tagged prefix such as `{bull}`, as BullMQ requires there).
	Cluster ClusterConfig `mapstructure:"cluster"`
	// Timeout bounds each Redis round trip (dial, read, write).
	Timeout time.Duration `mapstructure:"timeout"`

	// Prefix is BullMQ's key prefix (the Queue's and Worker's `prefix`
	// option, default `bull`).
	Prefix string `mapstructure:"prefix"`
	// Queues are the queue names to read. Empty: every queue under prefix,
	// found with SCAN (`<prefix>:*:meta`) every discovery_interval.
	Queues []string `mapstructure:"queues"`
	// DiscoveryInterval: how often the queues under prefix are looked for
	// when queues is empty.
	DiscoveryInterval time.Duration `mapstructure:"discovery_interval"`
	// PollInterval: how often each queue's events, active jobs, connected
	// workers and counts are read.
	PollInterval time.Duration `mapstructure:"poll_interval"`
	// MaxEventsPerPoll bounds the stream entries read per queue per poll
	// (the rest are read at the next poll): the cost per interval is bounded.
	MaxEventsPerPoll int `mapstructure:"max_events_per_poll"`
	// MaxActiveJobs bounds the active jobs read per queue per poll (LRANGE
	// 0 max-1, one HMGET each): beyond it the snapshot is not stated.
	MaxActiveJobs int `mapstructure:"max_active_jobs"`

	// StorageID is a storage extension (file_storage) that keeps each
	// queue's events stream position, so a restart resumes where the last
	// run stopped. Without it a restart starts at the stream's end.
	StorageID *component.ID `mapstructure:"storage"`

	// ServiceName is the service.name of the scheduler's records (the
	// worker_health processor's scheduler.service_names lists it).
	ServiceName string `mapstructure:"service_name"`

	// Metrics: the receiver's queue gauges (metadata.yaml).
	MetricsBuilderConfig metadata.MetricsBuilderConfig `mapstructure:",squash"`

	_ struct{}
}

// SentinelConfig selects Redis Sentinel.
type SentinelConfig struct {
	// MasterName is the monitored master's name; setting it turns Sentinel on.
	MasterName string `mapstructure:"master_name"`
	// Addresses of the sentinels, host:port.
	Addresses []string `mapstructure:"addresses"`
	// Username and Password of the sentinels, where they need their own.
	Username string              `mapstructure:"username"`
	Password configopaque.String `mapstructure:"password"`
}

// ClusterConfig selects Redis Cluster.
type ClusterConfig struct {
	// Enabled: endpoint (and addresses) are cluster nodes.
	Enabled bool `mapstructure:"enabled"`
	// Addresses are more seed nodes, host:port.
	Addresses []string `mapstructure:"addresses"`
}

var _ component.Config = (*Config)(nil)

// Validate checks the configuration; each error names its key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if c.Sentinel.MasterName == "" {
		if c.Endpoint == "" {
			bad("endpoint", "must be set (host:port of Redis)")
		} else if !validAddr(c.Endpoint) {
			bad("endpoint", "%q is not host:port", c.Endpoint)
		}
	} else {
		if len(c.Sentinel.Addresses) == 0 {
			bad("sentinel.addresses", "must list at least one sentinel (host:port) when sentinel.master_name is set")
		}
		for i, a := range c.Sentinel.Addresses {
			if !validAddr(a) {
				bad(fmt.Sprintf("sentinel.addresses[%d]", i), "%q is not host:port", a)
			}
		}
		if c.Cluster.Enabled {
			bad("cluster.enabled", "cannot be combined with sentinel.master_name")
		}
	}
	for i, a := range c.Cluster.Addresses {
		if !validAddr(a) {
			bad(fmt.Sprintf("cluster.addresses[%d]", i), "%q is not host:port", a)
		}
	}
	if len(c.Cluster.Addresses) > 0 && !c.Cluster.Enabled {
		bad("cluster.addresses", "set cluster.enabled: true to use them")
	}
	if c.DB < 0 || c.DB > 1<<16 {
		bad("db", "%d is out of range", c.DB)
	}
	if c.DB != 0 && c.Cluster.Enabled {
		bad("db", "Redis Cluster has only database 0")
	}
	if c.Timeout <= 0 {
		bad("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.Prefix == "" || strings.ContainsAny(c.Prefix, "*?[] \t\r\n") {
		bad("prefix", "%q must be BullMQ's key prefix (default bull), without spaces or glob characters", c.Prefix)
	}
	seen := map[string]bool{}
	for i, q := range c.Queues {
		key := fmt.Sprintf("queues[%d]", i)
		switch {
		case q == "":
			bad(key, "is empty")
		case strings.ContainsAny(q, "*?[]\r\n"):
			bad(key, "%q: a queue name, not a pattern (leave queues empty to read every queue under prefix)", q)
		case seen[q]:
			bad(key, "%q is listed twice", q)
		}
		seen[q] = true
	}
	if len(c.Queues) == 0 && c.DiscoveryInterval <= 0 {
		bad("discovery_interval", "must be positive when queues is empty, got %s", c.DiscoveryInterval)
	}
	if c.PollInterval < 100*time.Millisecond {
		bad("poll_interval", "must be at least 100ms, got %s", c.PollInterval)
	}
	if c.MaxEventsPerPoll < 1 || c.MaxEventsPerPoll > 1_000_000 {
		bad("max_events_per_poll", "must be 1..1000000, got %d", c.MaxEventsPerPoll)
	}
	if c.MaxActiveJobs < 1 || c.MaxActiveJobs > 1_000_000 {
		bad("max_active_jobs", "must be 1..1000000, got %d", c.MaxActiveJobs)
	}
	if c.ServiceName == "" {
		bad("service_name", "must be set (the worker_health processor's scheduler.service_names lists it)")
	}
	if err := c.TLS.Validate(); err != nil {
		bad("tls", "%v", err)
	}
	return errors.Join(errs...)
}

func validAddr(a string) bool {
	i := strings.LastIndexByte(a, ':')
	return i > 0 && i < len(a)-1 && !strings.ContainsAny(a, " /")
}
