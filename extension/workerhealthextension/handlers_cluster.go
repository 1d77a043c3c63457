package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/cluster"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// The cluster's side of the API: the answers for a worker another shard
// owns, the fleet across shards, and what the processor asks of the
// cluster (contract.Ownership, contract.ClusterFleet). The ring, the
// members and the peer client are internal/cluster.

var (
	_ contract.Ownership    = (*workerHealth)(nil)
	_ contract.ClusterFleet = (*workerHealth)(nil)
)

// Owns implements contract.Ownership. Without a ring (the members could not
// be resolved yet) every worker is owned: judging what arrives is safer
// than forgetting it.
func (wh *workerHealth) Owns(id string) bool {
	if wh.cluster == nil {
		return true
	}
	o, _ := wh.cluster.Owner(id)
	return o == "" || o == wh.cluster.Self()
}

// ClusterPending implements contract.ClusterFleet: the freshest pending
// count another shard reported.
func (wh *workerHealth) ClusterPending() (int64, time.Time, bool) {
	if wh.cluster == nil {
		return 0, time.Time{}, false
	}
	return wh.cluster.Pending()
}

// owned answers a request about one worker (/health/workers/{id}, its
// history, its page) for the whole tier: with local() when this shard owns
// the worker (or there is no cluster), else with the owner's answer to the
// same path, asked in one hop. escapedID is the id as in the path; path is
// the whole escaped path.
func (wh *workerHealth) owned(w http.ResponseWriter, r *http.Request, escapedID, path string, local func() int) int {
	c := wh.cluster
	if c == nil {
		return local()
	}
	id, err := url.PathUnescape(escapedID)
	if err != nil || id == "" {
		return local() // the local handler's answer
	}
	owner, st := c.Owner(id)
	if localScope(r) {
		// Another shard asks in one hop. Its ring may be a moment behind
		// this one's (each resolves every sync_interval): it asks the
		// former owner, which has handed the worker over already. While
		// this shard's ring settles, a worker it does not know is moving,
		// never 404 (the asker, settled on its old ring, passes a 404 on).
		if wh.store.Load().Lookup(id) == nil && c.Settling(st) {
			return writeUnknown(w, id, c.Self(), contract.ReasonMoving,
				"the shard ring changed and this shard does not judge the worker (it moves here or away)", st)
		}
		return local()
	}
	if owner == "" || owner == c.Self() {
		if wh.store.Load().Lookup(id) == nil && c.Settling(st) {
			return writeUnknown(w, id, c.Self(), contract.ReasonMoving,
				"this shard owns the worker since the shard ring changed and has not judged it yet", st)
		}
		w.Header()[contract.HeaderShard] = []string{c.Self()}
		return local()
	}
	q := r.URL.Query() // the caller's parameters (a history window...), and scope=local
	q.Set(contract.QueryScope, contract.ScopeLocal)
	req, err := c.NewRequest(r.Context(), r.Method, st, owner, path+"?"+q.Encode(), r.Header.Get("Authorization"))
	if err != nil {
		return writeError(w, http.StatusInternalServerError, "cannot ask the owning shard")
	}
	resp, err := c.Do(req)
	if err != nil {
		return writeUnknown(w, id, owner, contract.ReasonOwnerUnreachable,
			"the shard that owns the worker does not answer: "+err.Error(), st)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && c.Settling(st) {
		return writeUnknown(w, id, owner, contract.ReasonMoving,
			"the shard ring changed and the worker's new owner has not judged it yet", st)
	}
	h := w.Header()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	h[contract.HeaderShard] = []string{owner}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, cluster.MaxPeerBody))
	return resp.StatusCode
}

// writeUnknown is the answer for a worker whose owner's verdict cannot be
// had: unknown, may not take work (503), with the reason.
func writeUnknown(w http.ResponseWriter, id, shard, code, msg string, st *cluster.RingState) int {
	var since time.Time
	if st != nil {
		since = st.Changed.UTC()
	}
	wk := &contract.Worker{
		ID: id, State: contract.Unknown, Since: contract.TimeOf(since),
		Reasons: []contract.Reason{{Code: code, Message: msg, Since: since}},
	}
	w.Header()[contract.HeaderShard] = []string{shard}
	return writeJSON(w, http.StatusServiceUnavailable, store.WithEmptyLists(wk))
}

// handleFleet answers GET /health/fleet: the fleet figures without the
// workers; across every shard unless ?scope=local.
func (wh *workerHealth) handleFleet(w http.ResponseWriter, r *http.Request) int {
	v := wh.viewFor(r)
	body := cluster.FleetBody{Fleet: v.Fleet, Sources: v.Sources}
	if !v.Time.IsZero() {
		body.Time = &v.Time
	}
	return writeJSON(w, http.StatusOK, body)
}

// viewFor is the view a list request reads: this shard's own, or the whole
// tier's when clustered and not asked for ?scope=local.
func (wh *workerHealth) viewFor(r *http.Request) *store.View {
	if wh.cluster == nil || localScope(r) {
		return wh.store.Load()
	}
	return wh.cluster.FleetView(r.Context(), wh.store.Load(), r.Header.Get("Authorization"))
}

// pageViewFor is the view a paged list request (?limit=, ?after=) reads:
// this shard's own, or the merge of every shard's page of the same query
// when clustered (bounded by the shards times the page), and whether a
// shard has more after its page. q is the request's query, parsed once by
// the handler.
func (wh *workerHealth) pageViewFor(r *http.Request, q url.Values, keep store.StateFilter, pg listPage) (*store.View, bool) {
	local := wh.store.Load()
	if wh.cluster == nil || q.Get(contract.QueryScope) == contract.ScopeLocal {
		return local, false
	}
	rows, more := local.Page(keep, pg.after, pg.limit)
	return wh.cluster.FleetPage(r.Context(), local, rows, more, q, r.Header.Get("Authorization"))
}

func localScope(r *http.Request) bool {
	return strings.Contains(r.URL.RawQuery, contract.QueryScope) && r.URL.Query().Get(contract.QueryScope) == contract.ScopeLocal
}
