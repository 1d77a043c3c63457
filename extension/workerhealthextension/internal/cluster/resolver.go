package cluster

import (
	"context"
	"net"
	"slices"
	"strings"
)

// member is one shard: its name on the ring and where its health API is.
type member struct {
	endpoint string // as the exporter names it (the ring's key)
	api      string // host:port of its worker_health extension
}

// membersResolver gives the shards. Written here rather than taken from the
// load_balancing exporter because the exporter's resolvers are unexported;
// the dns one forms member names exactly as the exporter's does.
type membersResolver interface {
	resolve(ctx context.Context) ([]member, error)
}

type staticMembers []member

func (s staticMembers) resolve(context.Context) ([]member, error) { return s, nil }

// ipLookup is net.Resolver's LookupIPAddr (tests replace it).
type ipLookup func(ctx context.Context, host string) ([]net.IPAddr, error)

type dnsMembers struct {
	hostname, port, apiPort string
	lookup                  ipLookup
}

// resolve is the exporter's dnsResolver.resolve: every address of the name,
// IPv6 in brackets, ":port" appended when a port is configured, sorted.
func (d *dnsMembers) resolve(ctx context.Context) ([]member, error) {
	addrs, err := d.lookup(ctx, d.hostname)
	if err != nil {
		return nil, err
	}
	out := make([]member, 0, len(addrs))
	for _, a := range addrs {
		host := a.IP.String()
		if a.IP.To4() == nil {
			host = "[" + host + "]"
		}
		ep := host
		if d.port != "" {
			ep += ":" + d.port
		}
		out = append(out, member{endpoint: ep, api: host + ":" + d.apiPort})
	}
	// Sorted as the exporter sorts; an address listed twice stays twice,
	// as on the exporter's ring.
	slices.SortFunc(out, func(a, b member) int { return strings.Compare(a.endpoint, b.endpoint) })
	return out, nil
}

func newMembersResolver(cfg *Config) membersResolver {
	if cfg.Static.HasValue() {
		st := cfg.Static.Get()
		ms := make(staticMembers, 0, len(st.Members))
		for _, m := range st.Members {
			ms = append(ms, member{endpoint: m.Endpoint, api: m.API})
		}
		slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.endpoint, b.endpoint) })
		return ms
	}
	d := cfg.DNS.Get()
	return &dnsMembers{hostname: d.Hostname, port: d.Port, apiPort: d.APIPort, lookup: (&net.Resolver{}).LookupIPAddr}
}
