// Package cluster is this shard's view of a sharded gateway tier
// (docs/scaling.md): the members (static or resolved like the
// load_balancing exporter's dns resolver), the exporter's consistent-hash
// ring over them, the other shards' fleet figures, and the merged fleet
// list. It asks the other shards over HTTP; the answers it serves are the
// extension's handlers (handlers_cluster.go).
package cluster // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/cluster"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/ring"
)

// The other shards' health API paths it reads (routes.go of the extension).
const (
	pathWorkers = "/health/workers"
	pathFleet   = "/health/fleet"
)

// Cluster is this shard's view of the gateway tier (docs/scaling.md): the
// ring of members (the load_balancing exporter's, rebuilt from the same
// resolver), the other shards' fleet figures, and the merged fleet list.
type Cluster struct {
	cfg    *Config
	self   string
	logger *zap.Logger
	res    membersResolver
	now    func() time.Time
	// client asks the other shards; built at start from cfg.Client.
	client *http.Client
	// passAuth: no client auth is configured, so a caller's Authorization
	// header is passed on to the shard that answers for it.
	passAuth bool

	state atomic.Pointer[RingState]

	mu     sync.Mutex
	fleets map[string]peerFleet // the other members' last fleet figures
	cached *store.View          // the merged fleet, reused for ListCache
	at     time.Time
	// gather is held while the shards are asked for their lists, so
	// concurrent list requests ask them once and share the result.
	gather sync.Mutex

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// RingState is one resolution of the members. Immutable once stored.
type RingState struct {
	ring    *ring.Ring
	members map[string]member // by endpoint
	names   []string          // endpoints in ring order input (sorted)
	// Changed is when this ring replaced another, or when the cluster
	// started: until Changed+settle a worker its owner does not know is
	// "moving", not unknown.
	Changed time.Time
}

// peerFleet is what another shard last said of its own fleet.
type peerFleet struct {
	fleet contract.Fleet
	time  time.Time // the shard's snapshot time
	err   error
}

// New is the cluster of cfg (cfg.Enabled()); Start starts it.
func New(cfg *Config, logger *zap.Logger) *Cluster {
	return &Cluster{
		cfg:      cfg,
		self:     cfg.Self,
		logger:   logger.With(zap.String("shard", cfg.Self)),
		res:      newMembersResolver(cfg),
		now:      time.Now,
		passAuth: !cfg.Client.Auth.HasValue(),
		fleets:   map[string]peerFleet{},
	}
}

// Start builds the peer client, resolves the members once and starts the
// loop that resolves them and reads the other shards' fleet figures.
func (c *Cluster) Start(ctx context.Context, host component.Host, set component.TelemetrySettings) error {
	client, err := c.cfg.Client.ToClient(ctx, host.GetExtensions(), set)
	if err != nil {
		return fmt.Errorf("worker_health: cluster.client: %w", err)
	}
	c.client = client
	// The first resolution before serving, so the first request already
	// has a ring (a failed one is retried every sync_interval; until one
	// succeeds this shard answers for what it has).
	c.resolve(ctx)
	loopCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(c.cfg.SyncInterval)
		defer t.Stop()
		for {
			c.pollFleets(loopCtx)
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
				c.resolve(loopCtx)
			}
		}
	}()
	return nil
}

// Shutdown stops the loop; safe without Start.
func (c *Cluster) Shutdown() {
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
		c.cancel = nil
	}
	if c.client != nil {
		c.client.CloseIdleConnections()
	}
}

// resolve asks the resolver and swaps in a new ring when the members
// changed, logging the change once.
func (c *Cluster) resolve(ctx context.Context) {
	rctx := ctx
	if d := c.cfg.DNS.Get(); c.cfg.DNS.HasValue() {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	ms, err := c.res.resolve(rctx)
	if err != nil {
		if ctx.Err() == nil {
			c.logger.Warn("cluster: cannot resolve the shards; keeping the last ring", zap.Error(err))
		}
		return
	}
	names := make([]string, len(ms))
	byName := make(map[string]member, len(ms))
	for i, m := range ms {
		names[i] = m.endpoint
		byName[m.endpoint] = m
	}
	old := c.state.Load()
	if old != nil && slices.Equal(old.names, names) {
		return
	}
	st := &RingState{ring: ring.New(names), members: byName, names: names, Changed: c.now()}
	c.state.Store(st)
	_, in := byName[c.self]
	c.logger.Info("cluster: shard ring", zap.Strings("members", names), zap.Bool("self_is_member", in))
	if !in && len(names) > 0 {
		// Normal for a shard the DNS name does not list yet (not ready);
		// a mistake when it persists: cluster.self must be written as the
		// exporter writes this shard's endpoint.
		c.logger.Warn("cluster: this shard is not on the ring: it owns no worker; check cluster.self against the agents' load_balancing resolver", zap.String("self", c.self))
	}
	c.mu.Lock()
	c.cached = nil
	c.mu.Unlock()
}

// Owner is the member that owns the worker, or "" without a ring, and
// the ring it was read from.
func (c *Cluster) Owner(id string) (string, *RingState) {
	st := c.state.Load()
	if st == nil || len(st.names) == 0 {
		return "", st
	}
	return st.ring.Owner(id), st
}

// pollFleets reads every other shard's own fleet figures.
func (c *Cluster) pollFleets(ctx context.Context) {
	st := c.state.Load()
	if st == nil {
		return
	}
	peers := c.peers(st)
	got := make([]peerFleet, len(peers))
	var wg sync.WaitGroup
	for i, m := range peers {
		wg.Go(func() {
			var body FleetBody
			err := c.getJSON(ctx, m, pathFleet+"?"+contract.QueryScope+"="+contract.ScopeLocal, "", &body)
			got[i] = peerFleet{fleet: body.Fleet, err: err}
			if body.Time != nil {
				got[i].time = *body.Time
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.fleets)
	for i, m := range peers {
		prev := c.fleets[m.endpoint]
		if got[i].err != nil && prev.err == nil && ctx.Err() == nil {
			c.logger.Debug("cluster: a shard does not answer", zap.String("peer", m.endpoint), zap.Error(got[i].err))
		}
		c.fleets[m.endpoint] = got[i]
	}
}

// peers are the members other than this shard.
func (c *Cluster) peers(st *RingState) []member {
	out := make([]member, 0, len(st.members))
	for _, name := range st.names {
		if name != c.self {
			out = append(out, st.members[name])
		}
	}
	return slices.CompactFunc(out, func(a, b member) bool { return a.endpoint == b.endpoint })
}

// MaxPeerBody bounds what is read from another shard: a whole fleet list of
// 100,000 workers is about 150 MB; anything beyond this is not a shard.
const MaxPeerBody = 1 << 30

var errPeerStatus = errors.New("unexpected HTTP status")

// getJSON GETs path from a member into v.
func (c *Cluster) getJSON(ctx context.Context, m member, path, auth string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.Scheme+"://"+m.api+path, http.NoBody)
	if err != nil {
		return err
	}
	if auth != "" && c.passAuth {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%w %d from %s", errPeerStatus, resp.StatusCode, m.api)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, MaxPeerBody)).Decode(v)
}

// Settling reports whether the ring changed (or the cluster started) less
// than cluster.settle ago.
func (c *Cluster) Settling(st *RingState) bool {
	return st == nil || c.now().Sub(st.Changed) < c.cfg.Settle
}

// FleetBody is GET /health/fleet.
type FleetBody struct {
	// Time is the newest snapshot's evaluation time; null before any.
	Time    *time.Time         `json:"time"`
	Fleet   contract.Fleet     `json:"fleet"`
	Sources []store.SourceInfo `json:"sources"`
}

// peerList is a shard's GET /health/workers?scope=local.
type peerList struct {
	Time    *time.Time        `json:"time"`
	Fleet   contract.Fleet    `json:"fleet"`
	Next    *string           `json:"next"`
	Workers []json.RawMessage `json:"workers"`
}

// FleetView merges every shard's own workers into one view: each worker
// from the shard that owns it on the ring; a worker only a former owner
// still lists shows as `unknown` / `moving` (503) until its new owner
// judged it; an unreachable shard is named in `sources` with its error.
// Reused for cluster.list_cache.
func (c *Cluster) FleetView(ctx context.Context, local *store.View, auth string) *store.View {
	c.gather.Lock()
	defer c.gather.Unlock()
	c.mu.Lock()
	if c.cached != nil && c.now().Sub(c.at) < c.cfg.ListCache {
		v := c.cached
		c.mu.Unlock()
		return v
	}
	c.mu.Unlock()

	st := c.state.Load()
	if st == nil {
		return local
	}
	v, _ := c.merge(st, local, local.ByIDOrder, c.gatherPeers(ctx, st, pathWorkers+"?"+contract.QueryScope+"="+contract.ScopeLocal, auth))
	c.mu.Lock()
	c.cached, c.at = v, c.now()
	c.mu.Unlock()
	return v
}

// FleetPage is one page of the tier's list (?limit=&after=, and ?state=):
// every shard asked for its own page of the same query (?scope=local), the
// pages merged as FleetView merges whole lists. The first `limit` distinct
// ids of the merge are the tier's page: a shard that lists one of them
// returned it, since it returned every id it has up to its own limit-th.
// more: a shard said more follow its page. The cost is the shards times the
// page, not the fleet. Not cached (each page is its own query).
func (c *Cluster) FleetPage(ctx context.Context, local *store.View, localPage []*store.Entry, localMore bool, query url.Values, auth string) (*store.View, bool) {
	st := c.state.Load()
	if st == nil {
		return local, localMore
	}
	q := maps.Clone(query)
	q.Set(contract.QueryScope, contract.ScopeLocal)
	q.Del("trend")
	answers := c.gatherPeers(ctx, st, pathWorkers+"?"+q.Encode(), auth)
	v, more := c.merge(st, local, localPage, answers)
	// by_state is the whole tier's, as on the unpaged list: each shard's
	// own counts added up, not the page's.
	for s := range v.Fleet.ByState {
		v.Fleet.ByState[s] = local.Fleet.ByState[s]
		for _, a := range answers {
			if a.err == nil {
				v.Fleet.ByState[s] += a.list.Fleet.ByState[s]
			}
		}
	}
	v.ListHead = store.EncodeListHead(v)
	return v, more || localMore
}

// peerAnswer is one peer's list, or why there is none.
type peerAnswer struct {
	m    member
	list peerList
	err  error
}

// gatherPeers asks every other shard for path in parallel.
func (c *Cluster) gatherPeers(ctx context.Context, st *RingState, path, auth string) []peerAnswer {
	peers := c.peers(st)
	answers := make([]peerAnswer, len(peers))
	var wg sync.WaitGroup
	for i, m := range peers {
		answers[i].m = m
		wg.Go(func() {
			answers[i].err = c.getJSON(ctx, m, path, auth, &answers[i].list)
		})
	}
	wg.Wait()
	return answers
}

// merge builds the tier's view from this shard's entries and the peers'
// answers, and tells whether a peer said more follow its page.
func (c *Cluster) merge(st *RingState, local *store.View, localEntries []*store.Entry, answers []peerAnswer) (*store.View, bool) {
	// Every shard's entries, this one's from its own view.
	type shardEntries struct {
		name    string
		time    time.Time
		fleet   contract.Fleet
		entries []*store.Entry
	}
	shards := make([]shardEntries, 0, len(answers)+1)
	shards = append(shards, shardEntries{name: c.self, time: local.Time, fleet: local.Fleet, entries: localEntries})
	var failed []store.SourceInfo
	more := false
	for _, a := range answers {
		if a.err != nil {
			failed = append(failed, store.SourceInfo{ID: shardSourceID(a.m.endpoint).String(), Error: a.err.Error()})
			continue
		}
		more = more || a.list.Next != nil
		se := shardEntries{name: a.m.endpoint, fleet: a.list.Fleet}
		if a.list.Time != nil {
			se.time = *a.list.Time
		}
		for _, raw := range a.list.Workers {
			wk := &contract.Worker{}
			if json.Unmarshal(raw, wk) != nil || wk.ID == "" {
				continue
			}
			se.entries = append(se.entries, store.EncodedEntry(wk, raw, se.time))
		}
		shards = append(shards, se)
	}

	// Owned entries first; a worker listed only by a shard that does not
	// own it is moving (or its owner is unreachable).
	owned := map[string]bool{}
	for _, s := range shards {
		for _, e := range s.entries {
			if st.ring.Owner(e.Worker.ID) == s.name {
				owned[e.Worker.ID] = true
			}
		}
	}
	srcs := make([]*store.SourceIndex, 0, len(shards))
	var pendingFrom time.Time
	pendingIdx := -1
	for i, s := range shards {
		si := &store.SourceIndex{
			Snap:  &contract.Snapshot{Source: shardSourceID(s.name), Time: s.time, Fleet: s.fleet},
			Order: make([]*store.Entry, 0, len(s.entries)),
		}
		for _, e := range s.entries {
			o := st.ring.Owner(e.Worker.ID)
			switch {
			case o == s.name:
			case owned[e.Worker.ID]:
				continue // its owner lists it
			default:
				e = movingEntry(e, s.name, o, st)
				owned[e.Worker.ID] = true // once, from the first shard listing it
			}
			si.Order = append(si.Order, e)
		}
		// In id order, once each: a shard that lists a worker it owns twice
		// is served by its first copy.
		slices.SortStableFunc(si.Order, store.CompareIDs)
		si.Order = slices.CompactFunc(si.Order, func(a, b *store.Entry) bool { return a.Worker.ID == b.Worker.ID })
		// The scheduler's pending count reaches one shard; a former owner of
		// the empty id may still hold an older one: the freshest counts once.
		if s.fleet.Pending >= 0 && (pendingIdx < 0 || s.time.After(pendingFrom)) {
			pendingIdx, pendingFrom = i, s.time
		}
		srcs = append(srcs, si)
	}
	for i, si := range srcs {
		if i != pendingIdx {
			si.Snap.Fleet.Pending = -1
		}
	}
	v := store.BuildView(srcs)
	if len(failed) > 0 {
		v.Sources = append(v.Sources, failed...)
		v.ListHead = store.EncodeListHead(v)
	}
	return v, more
}

// movingEntry is a worker a shard lists that the ring gives to another
// shard which does not list it (yet): unknown until its owner judges it.
func movingEntry(e *store.Entry, from, to string, st *RingState) *store.Entry {
	wk := *e.Worker
	msg := fmt.Sprintf("the shard ring gives this worker to %s, which has not judged it yet; last judged %s by %s", to, e.Worker.State, from)
	wk.Reasons = append([]contract.Reason{{Code: contract.ReasonMoving, Message: msg, Since: st.Changed.UTC()}}, e.Worker.Reasons...)
	wk.State = contract.Unknown
	return store.NewEntry(&wk, e.At.Time())
}

// shardSourceID names a shard in the list's sources:
// "worker_health/shard:<its ring name>".
func shardSourceID(name string) component.ID {
	return component.NewIDWithName(metadata.Type, "shard:"+name)
}

// Self is this shard's name on the ring (cluster.self).
func (c *Cluster) Self() string { return c.self }

// Pending is the freshest pending count another shard reported
// (contract.ClusterFleet).
func (c *Cluster) Pending() (int64, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best peerFleet
	ok := false
	for _, f := range c.fleets {
		if f.err == nil && f.fleet.Pending >= 0 && (!ok || f.time.After(best.time)) {
			best, ok = f, true
		}
	}
	return best.fleet.Pending, best.time, ok
}

// NewRequest is a request for pathAndQuery (escaped, as the caller sent it)
// to the member owner of st. The caller's Authorization header (auth) is
// passed on when no client auth is configured.
func (c *Cluster) NewRequest(ctx context.Context, method string, st *RingState, owner, pathAndQuery, auth string) (*http.Request, error) {
	m := st.members[owner]
	// The host is a configured (or resolved) cluster member, the path the
	// caller's as it came, still escaped: nothing a caller chooses decides
	// where the request goes.
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.Scheme+"://"+m.api+pathAndQuery, http.NoBody)
	if err != nil {
		return nil, err
	}
	if auth != "" && c.passAuth {
		req.Header.Set("Authorization", auth)
	}
	return req, nil
}

// Do sends a request made by NewRequest with the peer client.
func (c *Cluster) Do(req *http.Request) (*http.Response, error) {
	return c.client.Do(req) //nolint:gosec // G704: a request made by NewRequest
}
