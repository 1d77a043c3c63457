package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/requestguard"
)

// The API's paths are fixed: schedulers and probes are written against them
// (docs/http-api.md). Route names double as the "endpoint" telemetry label.
const (
	pathWorkers  = "/health/workers"
	pathFleet    = "/health/fleet"
	prefixWorker = "/health/workers/"
	pathLivez    = "/livez"
	pathReadyz   = "/readyz"
	pathPage     = "/"
	prefixPage   = "/workers/"

	routeWorker   = "/health/workers/{id}"
	routeHistory  = "/health/workers/{id}/history"
	routeWorkerPg = "/workers/{id}"
	routeWorkers  = pathWorkers
	routeFleet    = pathFleet
	routeLivez    = pathLivez
	routeReadyz   = pathReadyz
	routePage     = pathPage
	routeNotFound = "other"
)

// Header values shared by every response: assigning prebuilt slices instead
// of Header().Set keeps the per-worker endpoint allocation-light.
var (
	hdrJSON    = []string{"application/json"}
	hdrHTML    = []string{"text/html; charset=utf-8"}
	hdrNoStore = []string{"no-store"}
	hdrNosniff = []string{"nosniff"}
	hdrAllow   = []string{"GET, HEAD"}
)

// routes is a small router of its own rather than http.ServeMux: ServeMux
// cleans paths before matching, which would redirect a worker id containing
// "//", "." or ".." to a different id. Here the id is everything after
// /health/workers/, unescaped once, so any string can be addressed.
func (wh *workerHealth) routes() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, code := wh.serve(w, r)
		wh.metrics.request(r.Context(), route, code)
	})
}

// routeOf names the route a path goes to (the telemetry label).
func routeOf(p string) string {
	switch {
	case strings.HasPrefix(p, prefixWorker):
		if len(p) > len(prefixWorker)+len(suffixHistory) && strings.HasSuffix(p, suffixHistory) {
			return routeHistory
		}
		return routeWorker
	case strings.HasPrefix(p, prefixPage) && len(p) > len(prefixPage):
		return routeWorkerPg
	case p == pathWorkers:
		return routeWorkers
	case p == pathFleet:
		return routeFleet
	case p == pathLivez:
		return routeLivez
	case p == pathReadyz:
		return routeReadyz
	case p == pathPage:
		return routePage
	}
	return routeNotFound
}

func (wh *workerHealth) serve(w http.ResponseWriter, r *http.Request) (string, int) {
	p := r.URL.EscapedPath()
	route := routeOf(p)
	h := w.Header()
	h["X-Content-Type-Options"] = hdrNosniff
	// Health answers are only true now: no cache may replay them.
	h["Cache-Control"] = hdrNoStore
	var handle func(http.ResponseWriter, *http.Request) int
	switch route {
	case routeWorker: // the hot path, called without a closure below
	case routeHistory:
		handle = func(w http.ResponseWriter, r *http.Request) int {
			esc := p[len(prefixWorker) : len(p)-len(suffixHistory)]
			return wh.owned(w, r, esc, p, func() int { return wh.handleHistory(w, r, esc) })
		}
	case routeWorkerPg:
		handle = func(w http.ResponseWriter, r *http.Request) int {
			esc := p[len(prefixPage):]
			return wh.owned(w, r, esc, p, func() int { return wh.handleWorkerPage(w, r, esc) })
		}
	case routeWorkers:
		handle = wh.handleWorkers
	case routeFleet:
		handle = wh.handleFleet
	case routeLivez:
		handle = wh.handleLivez
	case routeReadyz:
		handle = wh.handleReadyz
	case routePage:
		handle = wh.handlePage
	default:
		if p == requestguard.PathBadTarget {
			return route, writeError(w, http.StatusBadRequest, "the request target is not a valid URL (a malformed %-escape?); escape ids as docs/http-api.md says")
		}
		return route, writeError(w, http.StatusNotFound, "no such endpoint; see docs/http-api.md")
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h["Allow"] = hdrAllow
		return route, writeError(w, http.StatusMethodNotAllowed, "only GET and HEAD")
	}
	if handle == nil {
		if wh.cluster != nil {
			esc := p[len(prefixWorker):]
			return route, wh.owned(w, r, esc, p, func() int { return wh.handleWorker(w, r, esc) })
		}
		return route, wh.handleWorker(w, r, p[len(prefixWorker):])
	}
	return route, handle(w, r)
}

// errorBody is every error's JSON body.
type errorBody struct {
	Error string `json:"error"`
	// ID is the unknown worker's id, cut to maxEchoedID bytes: an error
	// must not grow with what a client sends.
	ID          string `json:"id,omitempty"`
	IDTruncated bool   `json:"id_truncated,omitempty"`
}

// maxEchoedID bounds the id a 404 repeats back.
const maxEchoedID = 256

func unknownWorker(id string) errorBody {
	b := errorBody{Error: "unknown worker", ID: id}
	if len(id) > maxEchoedID {
		// Cut at a rune boundary so a valid id stays valid UTF-8.
		n := maxEchoedID
		for n > 0 && !utf8.RuneStart(id[n]) {
			n--
		}
		b.ID, b.IDTruncated = id[:n], true
	}
	return b
}

func writeError(w http.ResponseWriter, code int, msg string) int {
	return writeJSON(w, code, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, body any) int {
	b, err := json.Marshal(body)
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"error":"cannot encode the response"}`)
	}
	w.Header()["Content-Type"] = hdrJSON
	w.WriteHeader(code)
	_, _ = w.Write(b)
	return code
}
