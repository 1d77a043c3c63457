package workerhealthextension

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
)

type listBody struct {
	Time    *time.Time         `json:"time"`
	Sources []store.SourceInfo `json:"sources"`
	Fleet   contract.Fleet     `json:"fleet"`
	Count   int                `json:"count"`
	Workers []contract.Worker  `json:"workers"`
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
	unhealthy.Drift = contract.NewDrift(contract.DriftDetail{Missing: []string{"r2"}})
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
}

// A malformed escape is the client's error, answered like every API error:
// JSON, not net/http's plain text, on the first request of a connection and
// on later ones (keep-alive, pipelined, after a request with a body).
// Go's client refuses to send such a target, so the requests are written by
// hand.
func TestMalformedTargetJSONError(t *testing.T) {
	wh := newTestExt(t)
	publish(wh, snapshot(testSource, t0, worker("a", contract.Healthy)))
	base := startTestExt(t, wh)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /health/workers/%zz HTTP/1.1\r\nHost: x\r\n\r\n" +
		"GET /health/workers/a HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /health/workers/a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" +
		"GET /health/workers/a%2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	for i, want := range []int{http.StatusBadRequest, http.StatusOK, http.StatusMethodNotAllowed, http.StatusBadRequest} {
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err, "response %d", i)
		var body errorBody
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "response %d", i)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), "response %d", i)
		assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "response %d", i)
		if want == http.StatusBadRequest {
			require.NoError(t, err, "response %d is JSON", i)
			assert.Contains(t, body.Error, "not a valid URL")
		}
	}

	// A request with a body is passed through intact and the connection
	// stays usable.
	conn2, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn2.Close()
	_, err = conn2.Write([]byte("POST /health/workers/a HTTP/1.1\r\nHost: x\r\ncontent-length: 11\r\n\r\nGET /%zz x\n" +
		"GET /health/workers/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	require.NoError(t, err)
	r = bufio.NewReader(conn2)
	for _, want := range []int{http.StatusMethodNotAllowed, http.StatusOK} {
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode)
	}
}

// A 404 repeats the unknown id, but never more than maxEchoedID bytes of it.
func TestUnknownIDEchoBounded(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)
	long := strings.Repeat("é", 50_000) // 100 kB
	code, body := get(t, workerURL(base, long))
	require.Equal(t, http.StatusNotFound, code)
	assert.Less(t, len(body), 1024, "the answer does not grow with the id")
	var e errorBody
	require.NoError(t, json.Unmarshal([]byte(body), &e))
	assert.True(t, e.IDTruncated)
	assert.True(t, strings.HasPrefix(long, e.ID))
	assert.True(t, utf8.ValidString(e.ID), "cut at a rune boundary")
	code, body = get(t, workerURL(base, "short"))
	require.Equal(t, http.StatusNotFound, code)
	assert.JSONEq(t, `{"error":"unknown worker","id":"short"}`, body)
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
	assert.Equal(t, []store.SourceInfo{{ID: testSource.String(), Time: t0, Workers: 4}}, all.Sources)

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

// Two ids that differ only in bytes that are not UTF-8 stay two workers
// everywhere: each answers at its own escaped path, and the JSON, which can
// only carry Unicode, tells them apart by id_escaped.
func TestInvalidUTF8IDsStayDistinct(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)
	publish(wh, snapshot(testSource, t0, worker("dup\xfe", contract.Unhealthy), worker("dup\xff", contract.Healthy), worker("fine", contract.Healthy)))

	for id, want := range map[string]int{"dup\xff": http.StatusOK, "dup\xfe": http.StatusServiceUnavailable} {
		code, body := get(t, workerURL(base, id))
		require.Equal(t, want, code, body)
		var got struct {
			ID        string `json:"id"`
			IDEscaped string `json:"id_escaped"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		assert.Equal(t, url.PathEscape(id), got.IDEscaped)
		back, err := url.PathUnescape(got.IDEscaped)
		require.NoError(t, err)
		assert.Equal(t, id, back, "id_escaped gives the id back")
	}
	_, body := get(t, workerURL(base, "fine"))
	assert.NotContains(t, body, "id_escaped", "only ids that need it")

	var list struct {
		Workers []struct {
			ID        string `json:"id"`
			IDEscaped string `json:"id_escaped"`
		} `json:"workers"`
	}
	_, body = get(t, base+"/health/workers")
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Workers, 3)
	assert.Equal(t, "dup%FE", list.Workers[0].IDEscaped)
	assert.Equal(t, "dup%FF", list.Workers[1].IDEscaped)

	_, body = get(t, base+"/")
	assert.Contains(t, body, `href="workers/dup%FE">dup%FE</a> <span class="muted">(not UTF-8)</span>`)
	assert.Contains(t, body, `href="workers/dup%FF">dup%FF</a> <span class="muted">(not UTF-8)</span>`)
}

// Every byte count the API serves is a JSON integer (docs/http-api.md), in
// every document that carries one.
func TestByteCountsAreIntegers(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)
	w := worker("w", contract.Unhealthy)
	w.Memory = contract.Memory{
		RSSBytes: 1<<53 + 1, SoftLimitBytes: 500 << 20, CgroupMaxBytes: 1 << 40,
		Roles: []contract.RoleMemory{{Role: "main", RSSBytes: 641728512, SoftLimitBytes: 1 << 30}},
	}
	publish(wh, snapshot(testSource, t0, w))
	for _, path := range []string{"/health/workers/w", "/health/workers"} {
		_, body := get(t, base+path)
		n := assertIntegerBytes(t, path, body)
		assert.Equal(t, 5, n, "%s: byte counts checked", path)
	}
}

// assertIntegerBytes checks every "*_bytes" number in a JSON document is an
// integer literal, and returns how many it saw.
func assertIntegerBytes(t *testing.T, what, body string) int {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var doc any
	require.NoError(t, dec.Decode(&doc), what)
	seen := 0
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(k, c)
			}
		case []any:
			for _, c := range v {
				walk(key, c)
			}
		case json.Number:
			if strings.HasSuffix(key, "_bytes") {
				seen++
				_, err := v.Int64()
				assert.NoError(t, err, "%s: %s is %s, not an integer", what, key, v)
			}
		}
	}
	walk("", doc)
	return seen
}
