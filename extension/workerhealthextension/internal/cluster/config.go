package cluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configoptional"
)

// Config makes this collector one shard of a gateway tier behind the
// load_balancing exporter (docs/scaling.md): the extension knows the same
// members the agents' exporter routes to, computes the same consistent hash
// of cicd.worker.id, and so can answer for any worker (asking the owning
// shard, one hop) and for the whole fleet (asking every shard). Off unless
// `self` is set.
type Config struct {
	// Self is this shard's name on the ring: exactly the string the agents'
	// load_balancing exporter has for it ("10.0.0.5:4317" from its DNS
	// resolver, or a `resolver.static.hostnames` entry as written there),
	// e.g. "${env:POD_IP}:4317". Empty (the default) turns the cluster off.
	Self string `mapstructure:"self"`

	// Static lists the members, for a fixed set of shards (systemd hosts).
	// Exactly one of static and dns.
	Static configoptional.Optional[StaticMembers] `mapstructure:"static"`
	// DNS resolves the members like the exporter's dns resolver, for a
	// Kubernetes headless Service. Exactly one of static and dns.
	DNS configoptional.Optional[DNSMembers] `mapstructure:"dns"`

	// Scheme of the other shards' health API: "http" (default) or "https"
	// (then `client.tls` applies).
	Scheme string `mapstructure:"scheme"`
	// Client is how this shard asks the others: timeout (default 2s), tls,
	// auth (a collector auth extension, e.g. bearertokenauth, when the API
	// requires one; without it the caller's Authorization header is passed
	// on), headers. `client.endpoint` is not used: members come from static
	// or dns.
	Client confighttp.ClientConfig `mapstructure:"client"`

	// SyncInterval is how often this shard reads the others' fleet figures
	// (the scheduler's pending count for the stall rule) and, with dns,
	// resolves the members. Default 5s, like the exporter's dns interval.
	SyncInterval time.Duration `mapstructure:"sync_interval"`
	// Settle is how long after the ring changed (and after start) a worker
	// its owner does not know answers 503 `unknown` with reason `moving`
	// instead of 404: long enough for the agents' exporters to see the same
	// change and the new owner to judge the worker. Default 30s.
	Settle time.Duration `mapstructure:"settle"`
	// ListCache is how long a merged fleet list (GET /health/workers, the
	// status page) is reused before the shards are asked again. Default 1s.
	ListCache time.Duration `mapstructure:"list_cache"`
}

// StaticMembers is a fixed list of shards.
type StaticMembers struct {
	// Members: every shard, this one included.
	Members []StaticMember `mapstructure:"members"`
}

// StaticMember is one shard.
type StaticMember struct {
	// Endpoint is its name on the ring: an entry of the agents' exporter's
	// `resolver.static.hostnames`, written the same way.
	Endpoint string `mapstructure:"endpoint"`
	// API is host:port of its worker_health extension.
	API string `mapstructure:"api"`
}

// DNSMembers resolves the shards from one name, as the exporter's dns
// resolver does: every address of `hostname` is a member "ip:port".
type DNSMembers struct {
	// Hostname, e.g. the headless Service
	// "workerwatch-gateway.observability.svc.cluster.local".
	Hostname string `mapstructure:"hostname"`
	// Port is the exporter's `resolver.dns.port` (the shards' OTLP port);
	// empty when the exporter's is. Part of the member names.
	Port string `mapstructure:"port"`
	// APIPort is the port of every shard's worker_health extension.
	// Default 8090.
	APIPort string `mapstructure:"api_port"`
	// Timeout of one resolution. Default 1s, as the exporter's.
	Timeout time.Duration `mapstructure:"timeout"`
}

const (
	defaultClusterTimeout = 2 * time.Second
	defaultSyncInterval   = 5 * time.Second
	defaultSettle         = 30 * time.Second
	defaultListCache      = time.Second
	defaultAPIPort        = "8090"
	defaultDNSTimeout     = time.Second
)

func DefaultConfig() Config {
	client := confighttp.NewDefaultClientConfig()
	client.Timeout = defaultClusterTimeout
	return Config{
		DNS:          configoptional.Default(DNSMembers{APIPort: defaultAPIPort, Timeout: defaultDNSTimeout}),
		Scheme:       "http",
		Client:       client,
		SyncInterval: defaultSyncInterval,
		Settle:       defaultSettle,
		ListCache:    defaultListCache,
	}
}

func (c *Config) Enabled() bool { return c.Self != "" }

// Check checks the cluster section; every error names its key. The
// extension's Config.Validate calls it (not named Validate, so that
// confmap does not run it a second time on the nested section).
func (c *Config) Check() error {
	if !c.Enabled() {
		if c.Static.HasValue() || c.DNS.HasValue() {
			return errors.New("cluster.self: required when cluster.static or cluster.dns is set (this shard's name on the ring)")
		}
		return nil
	}
	var errs []error
	add := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("cluster.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	switch {
	case !c.Static.HasValue() && !c.DNS.HasValue():
		add("static", "one of cluster.static or cluster.dns is required with cluster.self")
	case c.Static.HasValue() && c.DNS.HasValue():
		add("static", "cluster.static and cluster.dns are exclusive; set only one")
	case c.Static.HasValue():
		st := c.Static.Get()
		if len(st.Members) == 0 {
			add("static.members", "must list every shard, this one included")
		}
		seen := map[string]bool{}
		self := false
		for i, m := range st.Members {
			if m.Endpoint == "" {
				add(fmt.Sprintf("static.members[%d].endpoint", i), "must not be empty")
			}
			if seen[m.Endpoint] {
				add(fmt.Sprintf("static.members[%d].endpoint", i), "%q is listed twice", m.Endpoint)
			}
			seen[m.Endpoint] = true
			self = self || m.Endpoint == c.Self
			if err := checkHostPort(m.API); err != nil {
				add(fmt.Sprintf("static.members[%d].api", i), "%v", err)
			}
		}
		if len(st.Members) > 0 && !self {
			add("self", "%q is not one of cluster.static.members' endpoints", c.Self)
		}
	default:
		d := c.DNS.Get()
		if d.Hostname == "" {
			add("dns.hostname", "must not be empty")
		}
		if err := checkPort(d.APIPort); err != nil {
			add("dns.api_port", "%v", err)
		}
		if d.Port != "" {
			if err := checkPort(d.Port); err != nil {
				add("dns.port", "%v", err)
			}
		}
		if d.Timeout <= 0 {
			add("dns.timeout", "must be positive, got %s", d.Timeout)
		}
	}
	if c.Scheme != "http" && c.Scheme != "https" {
		add("scheme", `must be "http" or "https", got %q`, c.Scheme)
	}
	if c.Client.Endpoint != "" {
		add("client.endpoint", "is not used (members come from cluster.static or cluster.dns); remove it")
	}
	if c.Client.Timeout <= 0 {
		// A shard that hangs must not hold every request that needs it.
		add("client.timeout", "must be positive, got %s", c.Client.Timeout)
	}
	if c.SyncInterval <= 0 {
		add("sync_interval", "must be positive, got %s", c.SyncInterval)
	}
	if c.Settle < 0 {
		add("settle", "must not be negative, got %s", c.Settle)
	}
	if c.ListCache < 0 {
		add("list_cache", "must not be negative, got %s", c.ListCache)
	}
	return errors.Join(errs...)
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port, got %q", s)
	}
	if host == "" {
		return fmt.Errorf("must name a host, got %q", s)
	}
	return checkPort(port)
}

func checkPort(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("must be a port number (1-65535), got %q", s)
	}
	return nil
}
