package workerhealthextension

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

type listBody struct {
	Time    *time.Time        `json:"time"`
	Sources []sourceInfo      `json:"sources"`
	Fleet   contract.Fleet    `json:"fleet"`
	Count   int               `json:"count"`
	Workers []contract.Worker `json:"workers"`
}

func TestWorkerCodes(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)
	want := map[contract.State]int{
		contract.Healthy:   http.StatusOK,
		contract.Degraded:  http.StatusOK,
		contract.Unhealthy: http.StatusServiceUnavailable,
		contract.Stalled:   http.StatusServiceUnavailable,
		contract.Lost:      http.StatusServiceUnavailable,
		contract.Unknown:   http.StatusServiceUnavailable,
	}
	var ws []contract.Worker
	for _, st := range contract.AllStates {
		ws = append(ws, worker("w-"+string(st), st))
	}
	unhealthy := &ws[2]
	unhealthy.Reasons = []contract.Reason{{Code: "memory_over_soft_limit", Message: "over", Value: 600 << 20, Threshold: 500 << 20, Since: t0}}
	unhealthy.Runs.Worker = []string{"r1"}
	unhealthy.Runs.Scheduler = []string{"r1", "r2"}
	unhealthy.Drift.Missing = []string{"r2"}
	publish(wh, snapshot(testSource, t0, ws...))

	for st, code := range want {
		t.Run(string(st), func(t *testing.T) {
			got, body := get(t, workerURL(base, "w-"+string(st)))
			require.Equal(t, code, got, body)
			var w contract.Worker
			require.NoError(t, json.Unmarshal([]byte(body), &w))
			assert.Equal(t, st, w.State)
			assert.Equal(t, "w-"+string(st), w.ID)
		})
	}

	// The body carries the evidence a scheduler or a person needs.
	_, body := get(t, workerURL(base, "w-unhealthy"))
	for _, key := range []string{
		`"reasons":[{"code":"memory_over_soft_limit"`, `"value":629145600`, `"threshold":524288000`,
		`"since":`, `"last_seen":`, `"rss_bytes":314572800`, `"soft_limit_bytes":524288000`,
		`"worker":["r1"]`, `"scheduler":["r1","r2"]`, `"missing":["r2"]`,
	} {
		assert.Contains(t, body, key)
	}

	code, body := get(t, workerURL(base, "nope"))
	assert.Equal(t, http.StatusNotFound, code)
	assert.JSONEq(t, `{"error":"unknown worker","id":"nope"}`, body)
}

func TestWorkerIDsNeedingEscapes(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)
	ids := []string{
		"pool/a/worker-1", "with space", "ünïcødé-工人-🚀", "<script>alert(1)</script>",
		"..", ".", "a//b", "trailing/", "/leading", "100%", "q?x=1#frag", `quote"'`, "plus+sign",
	}
	var ws []contract.Worker
	for i, id := range ids {
		st := contract.Healthy
		if i%2 == 1 {
			st = contract.Unhealthy
		}
		ws = append(ws, worker(id, st))
	}
	publish(wh, snapshot(testSource, t0, ws...))
	for _, w := range ws {
		t.Run(w.ID, func(t *testing.T) {
			code, body := get(t, workerURL(base, w.ID))
			want := http.StatusOK
			if w.State != contract.Healthy {
				want = http.StatusServiceUnavailable
			}
			require.Equal(t, want, code, body)
			var got contract.Worker
			require.NoError(t, json.Unmarshal([]byte(body), &got))
			assert.Equal(t, w.ID, got.ID)
		})
	}
	// Unescaped slashes work too: the id is the rest of the path.
	code, _ := get(t, base+"/health/workers/pool/a/worker-1")
	assert.Equal(t, http.StatusOK, code)

	// The script id is JSON-escaped, never raw markup.
	_, body := get(t, workerURL(base, "<script>alert(1)</script>"))
	assert.NotContains(t, body, "<script>")
	assert.Contains(t, body, `\u003cscript\u003ealert(1)\u003c/script\u003e`)

	// A malformed escape is the client's error (Go's client refuses to
	// send one, so write the request by hand).
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /health/workers/%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestWorkersList(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)

	// Before any processor publishes: an empty fleet, not an error.
	code, body := get(t, base+"/health/workers")
	require.Equal(t, http.StatusOK, code)
	var empty listBody
	require.NoError(t, json.Unmarshal([]byte(body), &empty))
	assert.Nil(t, empty.Time)
	assert.Empty(t, empty.Workers)
	assert.NotNil(t, empty.Workers, "workers is [] not null")
	assert.Equal(t, int64(-1), empty.Fleet.Pending)
	assert.Len(t, empty.Fleet.ByState, len(contract.AllStates))

	// Published out of order: served sorted by id.
	publish(wh, snapshot(testSource, t0,
		worker("c", contract.Unhealthy), worker("a", contract.Healthy),
		worker("b", contract.Stalled), worker("d", contract.Unhealthy)))

	var all listBody
	code, body = get(t, base+"/health/workers")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &all))
	assert.Equal(t, []string{"a", "b", "c", "d"}, ids(all.Workers))
	assert.Equal(t, 4, all.Count)
	assert.Equal(t, 2, all.Fleet.ByState[contract.Unhealthy])
	assert.Equal(t, 0, all.Fleet.ByState[contract.Lost])
	require.NotNil(t, all.Time)
	assert.True(t, t0.Equal(*all.Time))
	assert.Equal(t, []sourceInfo{{ID: testSource.String(), Time: t0, Workers: 4}}, all.Sources)

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"?state=unhealthy", []string{"c", "d"}},
		{"?state=unhealthy,stalled", []string{"b", "c", "d"}},
		{"?state=unhealthy&state=healthy", []string{"a", "c", "d"}},
		{"?state=UNHEALTHY", []string{"c", "d"}},
		{"?state=lost", []string{}},
		{"?state=", []string{"a", "b", "c", "d"}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var got listBody
			code, body := get(t, base+"/health/workers"+tc.query)
			require.Equal(t, http.StatusOK, code)
			require.NoError(t, json.Unmarshal([]byte(body), &got))
			assert.Equal(t, tc.want, ids(got.Workers))
			assert.Equal(t, len(tc.want), got.Count)
			// Fleet counts describe the fleet, not the filtered page.
			assert.Equal(t, 2, got.Fleet.ByState[contract.Unhealthy])
		})
	}

	code, body = get(t, base+"/health/workers?state=sick")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, `state: unknown state \"sick\"`)

	// A trailing slash is the list too.
	code, _ = get(t, base+"/health/workers/")
	assert.Equal(t, http.StatusOK, code)
}

func TestMethodsAndUnknownPaths(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)
	publish(wh, snapshot(testSource, t0, worker("a", contract.Healthy)))

	resp, err := http.Post(base+"/health/workers/a", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))

	resp, err = http.Head(base + "/health/workers/a")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))

	code, _ := get(t, base+"/metrics")
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = get(t, base+"/health")
	assert.Equal(t, http.StatusNotFound, code)
}

func ids(ws []contract.Worker) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}
