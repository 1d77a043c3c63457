package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// handleWorker answers the scheduler's question about one worker: 200 may
// take work, 503 must not, 404 unknown. The body is the worker's JSON as
// encoded when a request first asked for it in this view (store.Entry).
func (wh *workerHealth) handleWorker(w http.ResponseWriter, r *http.Request, escapedID string) int {
	id, err := url.PathUnescape(escapedID)
	if err != nil {
		return writeError(w, http.StatusBadRequest, "the worker id is not a valid URL-escaped string")
	}
	if id == "" {
		// "/health/workers/" is the list, like "/health/workers".
		return wh.handleWorkers(w, r)
	}
	e := wh.store.Load().Lookup(id)
	if e == nil {
		return writeJSON(w, http.StatusNotFound, unknownWorker(id))
	}
	code := http.StatusServiceUnavailable
	if e.Worker.State.MayTakeWork() {
		code = http.StatusOK
	}
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(code)
	_, _ = w.Write(e.JSON()) //nolint:gosec // G705: the worker's JSON (encoding/json escapes <, > and &), sent as application/json
	return code
}

// lookup finds the worker a path names, or answers 400 (a malformed
// escape) or 404 (unknown) and returns nil with the code sent. (The hot
// path, handleWorker, does the same inline: "" there is the list.)
func (wh *workerHealth) lookup(w http.ResponseWriter, escapedID string) (*store.Entry, int) {
	id, err := url.PathUnescape(escapedID)
	if err != nil {
		return nil, writeError(w, http.StatusBadRequest, "the worker id is not a valid URL-escaped string")
	}
	e := wh.store.Load().Lookup(id)
	if e == nil {
		return nil, writeJSON(w, http.StatusNotFound, unknownWorker(id))
	}
	return e, 0
}

// maxListLimit is the largest page ?limit= may ask for.
const maxListLimit = 10_000

// listPage is what ?limit= and ?after= ask for: at most limit workers (0:
// every worker) whose ids come after `after`.
type listPage struct {
	limit int
	after string
}

func parseListPage(q url.Values) (listPage, error) {
	p := listPage{after: q.Get("after")}
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxListLimit {
			return p, fmt.Errorf("limit: must be a whole number from 1 to %d, got %q", maxListLimit, raw)
		}
		p.limit = n
	}
	return p, nil
}

// paged: the request asks for one page rather than the whole fleet.
func (p listPage) paged() bool { return p.limit > 0 || p.after != "" }

// handleWorkers lists the fleet sorted by id, optionally filtered by state,
// whole or a page at a time (?limit=&after=). Always 200 when the request
// is valid: the list describes workers, it is not itself a health verdict.
func (wh *workerHealth) handleWorkers(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	keep, err := store.ParseStateFilter(q["state"])
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error())
	}
	pg, err := parseListPage(q)
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error())
	}
	withTrend := q.Get("trend") == "1"
	var (
		v        *store.View
		peerMore bool
	)
	if pg.paged() {
		v, peerMore = wh.pageViewFor(r, q, keep, pg)
	} else {
		v = wh.viewFor(r)
	}
	if v.ListHead == nil {
		return writeError(w, http.StatusInternalServerError, "cannot encode the fleet")
	}
	rows, more := v.Page(keep, pg.after, pg.limit)
	more = more || peerMore
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return http.StatusOK
	}
	// The trends are for the rows the status page shows: the pages.MaxRows
	// most urgent workers of the response. A trend costs a pass over the
	// worker's history; the page's script asks every page_refresh.
	var trends map[*store.Entry][]int64
	if withTrend {
		worst := v.WorstFirst
		if pg.paged() {
			// A page of at most pages.MaxRows has a trend on every row;
			// only a longer one is ordered to pick its most urgent.
			worst = rows
			if len(rows) > pages.MaxRows {
				worst = slices.Clone(rows)
				slices.SortStableFunc(worst, func(a, b *store.Entry) int {
					return cmp.Compare(contract.Severity(b.Worker.State), contract.Severity(a.Worker.State))
				})
			}
		}
		shown := make([]*store.Entry, 0, min(len(rows), pages.MaxRows))
		ids := make([]string, 0, cap(shown))
		for _, e := range worst {
			if len(shown) == pages.MaxRows {
				break
			}
			if keep.Has(e.Worker.State) {
				shown, ids = append(shown, e), append(ids, e.Worker.ID)
			}
		}
		trends = make(map[*store.Entry][]int64, len(shown))
		for i, t := range wh.history.Trend(ids, wh.now(), pages.TrendPoints) {
			trends[shown[i]] = t
		}
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	// Splice "count", "next" and "workers" into the head object, left open
	// for them.
	_, _ = bw.Write(v.ListHead)
	_, _ = bw.WriteString(`,"count":`)
	_, _ = bw.WriteString(strconv.Itoa(len(rows)))
	if more && len(rows) > 0 {
		next, _ := json.Marshal(rows[len(rows)-1].Worker.ID)
		_, _ = bw.WriteString(`,"next":`)
		_, _ = bw.Write(next)
	}
	_, _ = bw.WriteString(`,"workers":[`)
	var num []byte
	for n, e := range rows {
		if n > 0 {
			_ = bw.WriteByte(',')
		}
		trend, ok := trends[e]
		if !ok {
			_, _ = bw.Write(e.JSON())
			continue
		}
		// The worker's object, reopened for its memory_trend.
		js := e.JSON()
		_, _ = bw.Write(js[:len(js)-1])
		_, _ = bw.WriteString(`,"memory_trend":[`)
		for i, b := range trend {
			if i > 0 {
				_ = bw.WriteByte(',')
			}
			if b < 0 {
				_, _ = bw.WriteString("null")
				continue
			}
			num = strconv.AppendInt(num[:0], b, 10)
			_, _ = bw.Write(num)
		}
		_, _ = bw.WriteString("]}")
	}
	_, _ = bw.WriteString("]}\n")
	_ = bw.Flush()
	return http.StatusOK
}
