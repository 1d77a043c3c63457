package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The API's paths are fixed: schedulers and probes are written against them
// (docs/http-api.md). Route names double as the "endpoint" telemetry label.
const (
	pathWorkers  = "/health/workers"
	prefixWorker = "/health/workers/"
	pathLivez    = "/livez"
	pathReadyz   = "/readyz"
	pathPage     = "/"

	routeWorker   = "/health/workers/{id}"
	routeWorkers  = pathWorkers
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

func (wh *workerHealth) serve(w http.ResponseWriter, r *http.Request) (string, int) {
	p := r.URL.EscapedPath()
	var route string
	var handle func(http.ResponseWriter, *http.Request) int
	switch {
	case strings.HasPrefix(p, prefixWorker):
		route = routeWorker
	case p == pathWorkers:
		route, handle = routeWorkers, wh.handleWorkers
	case p == pathLivez:
		route, handle = routeLivez, wh.handleLivez
	case p == pathReadyz:
		route, handle = routeReadyz, wh.handleReadyz
	case p == pathPage:
		route, handle = routePage, wh.handlePage
	default:
		return routeNotFound, writeError(w, http.StatusNotFound, "no such endpoint; see docs/http-api.md")
	}
	h := w.Header()
	h["X-Content-Type-Options"] = hdrNosniff
	// Health answers are only true now: no cache may replay them.
	h["Cache-Control"] = hdrNoStore
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h["Allow"] = hdrAllow
		return route, writeError(w, http.StatusMethodNotAllowed, "only GET and HEAD")
	}
	if handle == nil { // the hot path, called without a closure
		return route, wh.handleWorker(w, r, p[len(prefixWorker):])
	}
	return route, handle(w, r)
}

// errorBody is every error's JSON body.
type errorBody struct {
	Error string `json:"error"`
	ID    string `json:"id,omitempty"`
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
