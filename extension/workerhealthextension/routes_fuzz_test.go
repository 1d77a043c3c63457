package workerhealthextension

// Fuzz test of the health API's path and query parsing through the real
// handler (httptest, no socket). Properties: no panic; only the documented
// status codes; a worker answer (200/503) is served only for an id that is
// published, and its body is exactly that worker's JSON; url.PathEscape of a
// published id always finds it; the answer stays small (no allocation or body
// that grows with anything but the request itself and the published fleet).
//
// Plain `go test` replays the seeds and testdata/fuzz/FuzzRouter/;
// `go test -run '^$' -fuzz FuzzRouter -fuzztime 2m .` explores further.

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
)

func FuzzRouter(f *testing.F) {
	for _, s := range []struct{ method, target, id string }{
		{"GET", "/health/workers/worker-1", "worker-1"},
		{"GET", "/health/workers/a%2Fb%20c", "a/b c"},
		{"GET", "/health/workers/..", ".."},
		{"GET", "/health/workers/../../livez", "x"},
		{"GET", "/health/workers/%2e%2e", ".."},
		{"GET", "/health/workers/%00", "\x00"},
		{"GET", "/health/workers/%zz", "%zz"},
		{"GET", "/health/workers/%", "%"},
		{"GET", "/health/workers//double", "/double"},
		{"GET", "/health/workers/", ""},
		{"GET", "/health/workers?state=healthy,stalled&state=LOST", "w"},
		{"GET", "/health/workers?state=nope", "w"},
		{"GET", "/health/workers?state=%ff%00;x=%", "w"},
		{"HEAD", "/health/workers?state=,,,", "w"},
		{"GET", "/?state=unhealthy&x=<script>", "<script>alert(1)</script>"},
		{"POST", "/health/workers/w", "w"},
		{"DELETE", "/livez", "w"},
		{"GET", "/readyz?verbose", "w"},
		{"GET", "/health/workers/" + strings.Repeat("%41", 3000), strings.Repeat("A", 3000)},
		{"GET", "/health/workers/\xff\xfe", "\xff\xfe"},
		{"GET", "/health/workers/%E2%80%AE", "\u202e"},
		{"GET", "//health/workers/w", "w"},
		{"GET", "/health/workers/w?state=healthy#frag", "w"},
	} {
		f.Add(s.method, s.target, s.id)
	}
	// One extension for the whole run (building one per input is most of
	// the cost); each input publishes a newer snapshot, which replaces the
	// previous one.
	wh := newTestExt(f)
	var gen atomic.Int64
	f.Fuzz(func(t *testing.T, method, target, id string) {
		// The fuzzed id is published next to fixed ones, in a state that
		// depends on its length so both 200 and 503 are exercised.
		states := contract.AllStates
		publish(wh, snapshot(testSource, t0.Add(time.Duration(gen.Add(1))*time.Millisecond),
			worker("worker-1", contract.Healthy),
			worker("a/b c", contract.Unhealthy),
			worker(id, states[len(id)%len(states)])))
		v := wh.store.Load()

		// 1. The fuzzed request.
		req, err := http.NewRequest(method, "http://localhost"+target, nil)
		if err == nil && req.URL.Host == "localhost" {
			rec := serve(wh, req)
			checkAnswer(t, v, req, rec)
		}

		// 2. Round trip: the escaped id finds exactly that worker.
		if id == "" {
			return
		}
		req = httptest.NewRequest(http.MethodGet, "/health/workers/"+url.PathEscape(id), nil)
		rec := serve(wh, req)
		e := v.Lookup(id)
		if e == nil {
			t.Fatalf("published id %q is not in the view", id)
		}
		if rec.Code != http.StatusOK && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("GET of published id %q: %d %s", id, rec.Code, rec.Body)
		}
		if !bytes.Equal(rec.Body.Bytes(), e.JSON()) {
			t.Fatalf("GET of %q served another body: %s", id, rec.Body)
		}
	})
}

func serve(wh *workerHealth, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	wh.handler.ServeHTTP(rec, req)
	return rec
}

func checkAnswer(t *testing.T, v *store.View, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	switch rec.Code {
	case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusServiceUnavailable:
	default:
		t.Fatalf("%s %q: status %d", req.Method, req.URL, rec.Code)
	}
	p := req.URL.EscapedPath()
	escaped, isWorker := strings.CutPrefix(p, prefixWorker)
	if isWorker && escaped != "" && (rec.Code == http.StatusOK || rec.Code == http.StatusServiceUnavailable) {
		// A worker verdict: only for a published id, with its own body.
		id, err := url.PathUnescape(escaped)
		if err != nil {
			t.Fatalf("%q: a verdict for an id that does not unescape", p)
		}
		e := v.Lookup(id)
		if e == nil {
			t.Fatalf("%q: verdict %d for unpublished id %q", p, rec.Code, id)
		}
		if !bytes.Equal(rec.Body.Bytes(), e.JSON()) && req.Method == http.MethodGet {
			t.Fatalf("%q: body is not worker %q's", p, id)
		}
		want := http.StatusServiceUnavailable
		if e.Worker.State.MayTakeWork() {
			want = http.StatusOK
		}
		if rec.Code != want {
			t.Fatalf("%q: %d for state %s", p, rec.Code, e.Worker.State)
		}
	}
	// Bounded answer: the fleet is three workers; only an error echoing the
	// id grows with the request.
	if limit := 64<<10 + 8*len(req.URL.String()); rec.Body.Len() > limit {
		t.Fatalf("%q: %d-byte body", p, rec.Body.Len())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") && !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("content type %q", ct)
	}
}
