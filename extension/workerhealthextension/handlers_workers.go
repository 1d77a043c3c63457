package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"bufio"
	"net/http"
	"net/url"
	"strconv"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
)

// handleWorker answers the scheduler's question about one worker: 200 may
// take work, 503 must not, 404 unknown. The body is the worker's JSON as
// encoded when its snapshot was published.
func (wh *workerHealth) handleWorker(w http.ResponseWriter, r *http.Request, escapedID string) int {
	id, err := url.PathUnescape(escapedID)
	if err != nil {
		return writeError(w, http.StatusBadRequest, "the worker id is not a valid URL-escaped string")
	}
	if id == "" {
		// "/health/workers/" is the list, like "/health/workers".
		return wh.handleWorkers(w, r)
	}
	e := wh.store.Load().ByID[id]
	if e == nil {
		return writeJSON(w, http.StatusNotFound, unknownWorker(id))
	}
	code := http.StatusServiceUnavailable
	if e.Worker.State.MayTakeWork() {
		code = http.StatusOK
	}
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(code)
	_, _ = w.Write(e.JSON)
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
	e := wh.store.Load().ByID[id]
	if e == nil {
		return nil, writeJSON(w, http.StatusNotFound, unknownWorker(id))
	}
	return e, 0
}

// handleWorkers lists the fleet sorted by id, optionally filtered by state.
// Always 200 when the request is valid: the list describes workers, it is not
// itself a health verdict.
func (wh *workerHealth) handleWorkers(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	keep, err := store.ParseStateFilter(q["state"])
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error())
	}
	withTrend := q.Get("trend") == "1"
	v := wh.viewFor(r)
	if v.ListHead == nil {
		return writeError(w, http.StatusInternalServerError, "cannot encode the fleet")
	}
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
		shown := make([]*store.Entry, 0, min(v.Count(keep), pages.MaxRows))
		ids := make([]string, 0, cap(shown))
		for _, e := range v.WorstFirst {
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
	// Splice "count" and "workers" into the head object, left open for them.
	_, _ = bw.Write(v.ListHead)
	_, _ = bw.WriteString(`,"count":`)
	_, _ = bw.WriteString(strconv.Itoa(v.Count(keep)))
	_, _ = bw.WriteString(`,"workers":[`)
	n := 0
	var num []byte
	for _, e := range v.ByIDOrder {
		if !keep.Has(e.Worker.State) {
			continue
		}
		if n > 0 {
			_ = bw.WriteByte(',')
		}
		n++
		trend, ok := trends[e]
		if !ok {
			_, _ = bw.Write(e.JSON)
			continue
		}
		// The worker's object, reopened for its memory_trend.
		_, _ = bw.Write(e.JSON[:len(e.JSON)-1])
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
