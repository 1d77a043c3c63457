package workerhealthextension

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// leakFixture is a worker that leaks for 35 minutes, snapshots every 10 s,
// and turns unhealthy 9 minutes before now.
func leakFixture(t *testing.T, now time.Time) (*workerHealth, leak) {
	t.Helper()
	wh := newTestExt(t)
	wh.now = func() time.Time { return now }
	l := leak{id: "openfn-worker-7", start: now.Add(-35 * time.Minute), overAt: now.Add(-9*time.Minute + 3*time.Second), soft: 900 << 20, mainSoft: 400 << 20}
	publishHistory(wh, l.start, now, func(at time.Time) []contract.Worker {
		return []contract.Worker{l.at(at), worker("steady", contract.Healthy)}
	})
	return wh, l
}

func TestHistoryJSON(t *testing.T) {
	now := time.Now().Truncate(10 * time.Second)
	wh, l := leakFixture(t, now)
	base := startTestExt(t, wh)

	code, body := get(t, base+"/health/workers/"+l.id+"/history")
	require.Equal(t, http.StatusOK, code, body)
	var h historyBody
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	assert.Equal(t, l.id, h.ID)
	assert.InDelta(t, 1800.0, h.WindowSeconds, 0)
	assert.InDelta(t, 10.0, h.ResolutionSeconds, 0)
	require.Len(t, h.Samples, 180, "30 minutes at 10 s")
	assert.True(t, h.Samples[0].Time.After(now.Add(-30*time.Minute)) || h.Samples[0].Time.Equal(now.Add(-30*time.Minute)))
	assert.True(t, h.Samples[179].Time.Equal(now))

	// The climb: the main role's memory grows with every sample.
	for i := 1; i < len(h.Samples); i++ {
		prev, cur := roleRSS(h.Samples[i-1], contract.RoleMain), roleRSS(h.Samples[i], contract.RoleMain)
		require.Greater(t, cur, prev, "sample %d", i)
	}
	last := h.Samples[179]
	want := l.at(now)
	assert.Equal(t, want.Memory.RSSBytes, last.Memory.RSSBytes, "RSS is whole pages: KiB lose nothing")
	assert.Equal(t, int64(900<<20), last.Memory.SoftLimitBytes)
	assert.Equal(t, []historyRole{
		{Role: contract.RoleChild, RSSBytes: want.Memory.Roles[0].RSSBytes},
		{Role: contract.RoleMain, RSSBytes: want.Memory.Roles[1].RSSBytes, SoftLimitBytes: 400 << 20},
	}, last.Memory.Roles)
	assert.Equal(t, contract.CPU{MainCores: want.CPU.MainCores, LimitCPUs: 2}, last.CPU)
	assert.Equal(t, historyRuns{Worker: len(want.Runs.Worker), Scheduler: len(want.Runs.Scheduler), Capacity: 2}, last.Runs)
	assert.Equal(t, contract.Unhealthy, last.State)

	// The transition at the time the processor says, with its evidence; the
	// first sighting (35 minutes ago) is outside the window.
	require.Len(t, h.Transitions, 1)
	tr := h.Transitions[0]
	assert.Equal(t, contract.Healthy, tr.From)
	assert.Equal(t, contract.Unhealthy, tr.To)
	assert.True(t, l.overAt.Truncate(time.Millisecond).Equal(tr.Time), "%s, want %s", tr.Time, l.overAt)
	require.Len(t, tr.Reasons, 1)
	assert.Equal(t, "memory_over_soft_limit", tr.Reasons[0].Code)
	assert.InDelta(t, float64(400<<20), tr.Reasons[0].Threshold, 0)

	// The current judgement comes with it.
	var cur contract.Worker
	require.NoError(t, json.Unmarshal(h.Worker, &cur))
	assert.Equal(t, contract.Unhealthy, cur.State)
	require.Len(t, cur.Runs.Recent.Records(), 2)
	assert.Equal(t, contract.KillTimeout, cur.Runs.Recent.Records()[1].KillReason)

	assert.GreaterOrEqual(t, assertIntegerBytes(t, "history", body), 180*6, "every byte count an integer")

	code, body = get(t, base+"/health/workers/nope/history")
	assert.Equal(t, http.StatusNotFound, code)
	assert.JSONEq(t, `{"error":"unknown worker","id":"nope"}`, body)
}

// history::window: 0 turns the history off: nothing is kept per worker,
// /health/workers/{id}/history answers with no samples and a window of 0,
// and the worker page says the history is off.
func TestHistoryOff(t *testing.T) {
	now := time.Now().Truncate(10 * time.Second)
	wh := newTestExt(t, func(c *Config) { c.History.Window = 0 })
	wh.now = func() time.Time { return now }
	l := leak{id: "openfn-worker-7", start: now.Add(-35 * time.Minute), overAt: now.Add(-9*time.Minute + 3*time.Second), soft: 900 << 20, mainSoft: 400 << 20}
	publishHistory(wh, l.start, now, func(at time.Time) []contract.Worker {
		return []contract.Worker{l.at(at)}
	})
	base := startTestExt(t, wh)
	assert.Empty(t, wh.history.Series(l.id, now.Add(-time.Hour)).Transitions, "no transition kept")

	code, body := get(t, base+"/health/workers/"+l.id+"/history")
	require.Equal(t, http.StatusOK, code, body)
	var h historyBody
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	assert.Empty(t, h.Samples)
	assert.Empty(t, h.Transitions)
	assert.Zero(t, h.WindowSeconds)
	var cur contract.Worker
	require.NoError(t, json.Unmarshal(h.Worker, &cur))
	assert.Equal(t, contract.Unhealthy, cur.State, "the verdict is there")

	code, body = get(t, base+"/workers/"+l.id)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "The history is off on this collector")
	assert.NotContains(t, body, "No samples yet")
}

func roleRSS(s historySample, role string) int64 {
	for _, r := range s.Memory.Roles {
		if r.Role == role {
			return r.RSSBytes
		}
	}
	return -1
}

// "/history" is a suffix of the escaped path: a worker whose id ends in
// "/history" is reached with the slash escaped, and its history with the
// suffix after that.
func TestHistoryPathSuffix(t *testing.T) {
	wh := newTestExt(t)
	publish(wh, snapshot(testSource, t0, worker("a", contract.Healthy), worker("a/history", contract.Lost)))
	base := startTestExt(t, wh)

	code, body := get(t, base+"/health/workers/a%2Fhistory")
	require.Equal(t, http.StatusServiceUnavailable, code, "the worker a/history itself")
	assert.Contains(t, body, `"id":"a/history"`)
	code, body = get(t, base+"/health/workers/a/history")
	require.Equal(t, http.StatusOK, code, "the history of a")
	assert.Contains(t, body, `{"id":"a",`)
	assert.Contains(t, body, `"samples":[`)
	code, body = get(t, base+"/health/workers/a%2Fhistory/history")
	require.Equal(t, http.StatusOK, code, "the history of a/history")
	assert.Contains(t, body, `"id":"a/history"`)
}

func TestWorkerPageServerRendered(t *testing.T) {
	now := time.Now().Truncate(10 * time.Second)
	wh, l := leakFixture(t, now)
	base := startTestExt(t, wh)

	resp, err := http.Get(base + "/workers/" + l.id)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Equal(t, wh.page.CSP()[0], resp.Header.Get("Content-Security-Policy"), "the fleet page's policy")
	doc, err := html.Parse(resp.Body)
	require.NoError(t, err)
	assert.Empty(t, findAll(doc, "script"), "no script on the worker page")
	checkLeakPage(t, doc, l, now)
}

// checkLeakPage checks the page of the leak fixture, whether Go's parser or
// Chromium produced doc: the climb, the transition at the right time, and
// the tables.
func checkLeakPage(t *testing.T, doc *html.Node, l leak, now time.Time) {
	t.Helper()
	assert.Equal(t, l.id, text(findByID(doc, "worker-id")))
	assert.Equal(t, "unhealthy", text(findByID(doc, "state")))

	mem := findByID(doc, "chart-memory")
	require.NotNil(t, mem, "the memory chart")
	lines := map[string][][2]float64{}
	for _, p := range findAll(mem, "polyline") {
		lines[attr(p, "data-series")] = points(t, attr(p, "points"))
	}
	for _, s := range []string{"tree", "tree soft limit", "main", "main soft limit", "child"} {
		require.NotEmpty(t, lines[s], "series %q", s)
	}
	// The climb: y falls (memory rises) from the first point to the last,
	// and each of the main role's points is at or above the one before.
	main := lines["main"]
	require.Len(t, main, 180)
	for i := 1; i < len(main); i++ {
		require.LessOrEqual(t, main[i][1], main[i-1][1], "main role point %d", i)
	}
	assert.Less(t, main[179][1], main[0][1]-20, "a visible climb")
	// The main role crosses its soft limit (a flat dashed line) in the chart.
	limitY := lines["main soft limit"][0][1]
	assert.Greater(t, main[0][1], limitY, "starts under the limit")
	assert.Less(t, main[179][1], limitY, "ends over it")

	// The transition mark: at the time the processor gave, where that time
	// falls on the x axis.
	marks := findAll(mem, "line")
	var mark *html.Node
	for _, m := range marks {
		if strings.Contains(attr(m, "class"), "mark") {
			mark = m
		}
	}
	require.NotNil(t, mark, "a transition mark")
	assert.Contains(t, attr(mark, "class"), "s-unhealthy")
	assert.Equal(t, l.overAt.UTC().Format(time.RFC3339), attr(mark, "data-at"))
	x, err := strconv.ParseFloat(attr(mark, "x1"), 64)
	require.NoError(t, err)
	wantX := pages.PlotLeft + (pages.PlotRight-pages.PlotLeft)*(30*time.Minute-now.Sub(l.overAt)).Seconds()/(30*time.Minute).Seconds()
	assert.InDelta(t, wantX, x, 0.11)
	// The state band turns red there too.
	var red []float64
	for _, r := range findAll(mem, "rect") {
		if strings.Contains(attr(r, "class"), "s-unhealthy") {
			v, _ := strconv.ParseFloat(attr(r, "x"), 64)
			red = append(red, v)
		}
	}
	require.Len(t, red, 1)
	assert.InDelta(t, wantX, red[0], (pages.PlotRight-pages.PlotLeft)*10/1800.0+0.1, "the band starts at the first unhealthy sample")

	// The timeline, recent runs and sources.
	trs := tableRowsOf(t, findByID(doc, "transitions"))
	require.Len(t, trs, 1)
	assert.Equal(t, l.overAt.UTC().Format("15:04:05 UTC")+"8m ago", text(trs[0].cells[0]))
	assert.Equal(t, "healthy → unhealthy", text(trs[0].cells[1]))
	assert.Contains(t, text(trs[0].cells[2]), "memory_over_soft_limit")
	runs := tableRowsOf(t, findByID(doc, "runs"))
	require.Len(t, runs, 2)
	assert.Equal(t, []string{"run-8", "2", "timeout", "5m", "timeout", "5m ago"}, cellTexts(runs[1]), "the run's attempt")
	assert.Equal(t, []string{"run-9", "–", "success", "1m", "–", "3m ago"}, cellTexts(runs[0]), "an attempt the sender did not number")
	inc := text(findByID(doc, "incarnation"))
	assert.Contains(t, inc, "pid 4242, started "+l.start.UTC().Format("2006-01-02 15:04:05 UTC"), "the current incarnation and when it started")
	assert.Contains(t, inc, "from the process tree")
	srcs := tableRowsOf(t, findByID(doc, "sources"))
	require.Len(t, srcs, 3)
	assert.Equal(t, []string{"process tree", "yes", "0s ago", "worker_name=" + l.id}, cellTexts(srcs[0]))
	assert.Equal(t, "no", text(srcs[2].cells[1]))
}

func points(t *testing.T, s string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(s) {
		xs, ys, ok := strings.Cut(p, ",")
		require.True(t, ok, p)
		x, err := strconv.ParseFloat(xs, 64)
		require.NoError(t, err)
		y, err := strconv.ParseFloat(ys, 64)
		require.NoError(t, err)
		out = append(out, [2]float64{x, y})
	}
	return out
}

func cellTexts(r domRow) []string {
	out := make([]string, len(r.cells))
	for i, c := range r.cells {
		out[i] = strings.TrimSpace(text(c))
	}
	return out
}

// Hostile ids and strings stay text on the worker page, and its links lead
// back to the root whatever slashes the id holds.
func TestWorkerPageEscapingAndLinks(t *testing.T) {
	wh := newTestExt(t)
	wh.now = func() time.Time { return t0 }
	bad := worker(scriptID, contract.Unhealthy)
	bad.Name = `"><img src=x onerror=alert(2)>`
	bad.Reasons = []contract.Reason{{Code: "<b>x</b>", Message: "<img src=x onerror=alert(3)>"}}
	bad.Memory.Roles = []contract.RoleMemory{{Role: "<svg onload=alert(4)>", RSSBytes: 1 << 20}}
	bad.Runs.Recent = contract.PackRuns([]contract.RunRecord{{ID: "<script>alert(5)</script>", Result: "<i>"}})
	bad.Sources = contract.NewSources(contract.Source{Seen: true, IDs: contract.IDList("k=<script>")}, bad.Sources.Telemetry(), bad.Sources.Scheduler())
	slashed := worker("pool/a/w-1", contract.Healthy)
	publish(wh, snapshot(testSource, t0, bad, slashed, worker("dup\xff", contract.Lost)))
	base := startTestExt(t, wh)

	code, body := get(t, base+"/workers/"+url.PathEscape(scriptID))
	require.Equal(t, http.StatusOK, code, body)
	doc, err := html.Parse(strings.NewReader(body))
	require.NoError(t, err)
	assert.Empty(t, findAll(doc, "script"))
	assert.Empty(t, findAll(doc, "img"))
	assert.Empty(t, findAll(doc, "b"))
	for _, s := range findAll(doc, "svg") {
		assert.Empty(t, attr(s, "onload"))
	}
	assert.Equal(t, scriptID, text(findByID(doc, "worker-id")))
	assert.Contains(t, body, "&lt;svg onload=alert(4)&gt;")

	// Links: escaped id, one level down; unescaped slashes, more levels.
	for path, up := range map[string]string{
		"/workers/pool%2Fa%2Fw-1": "../",
		"/workers/pool/a/w-1":     "../../../",
	} {
		code, body := get(t, base+path)
		require.Equal(t, http.StatusOK, code, path)
		doc, err := html.Parse(strings.NewReader(body))
		require.NoError(t, err)
		var hrefs []string
		for _, a := range findAll(doc, "a") {
			hrefs = append(hrefs, attr(a, "href"))
		}
		assert.Equal(t, []string{up, up + "health/workers/pool%2Fa%2Fw-1", up + "health/workers/pool%2Fa%2Fw-1/history"}, hrefs, path)
	}

	// An id that is not UTF-8 is shown escaped.
	code, body = get(t, base+"/workers/dup%FF")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `<h1 class="mono" id="worker-id">dup%FF</h1> <span class="muted">(not UTF-8)</span>`)

	code, body = get(t, base+"/workers/nope")
	assert.Equal(t, http.StatusNotFound, code)
	assert.JSONEq(t, `{"error":"unknown worker","id":"nope"}`, body)
	code, _ = get(t, base+"/workers/")
	assert.Equal(t, http.StatusNotFound, code)
}

// The fleet list with ?trend=1 carries each worker's memory trend: what the
// page's script draws, the same numbers the server-rendered rows use.
func TestWorkersListTrend(t *testing.T) {
	now := time.Now().Truncate(10 * time.Second)
	wh, l := leakFixture(t, now)
	base := startTestExt(t, wh)
	code, body := get(t, base+"/health/workers?trend=1&state=unhealthy")
	require.Equal(t, http.StatusOK, code)
	var list struct {
		Count   int `json:"count"`
		Workers []struct {
			ID    string   `json:"id"`
			Trend []*int64 `json:"memory_trend"`
		} `json:"workers"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Workers, 1)
	tr := list.Workers[0].Trend
	require.Len(t, tr, pages.TrendPoints)
	want := wh.history.Trend([]string{l.id}, now, pages.TrendPoints)[0]
	for i, v := range tr {
		if want[i] < 0 {
			assert.Nil(t, v, "point %d", i)
			continue
		}
		require.NotNil(t, v, "point %d", i)
		assert.Equal(t, want[i], *v, "point %d", i)
		if i > 0 && tr[i-1] != nil {
			assert.Greater(t, *v, *tr[i-1], "the trend climbs")
		}
	}
	_, plain := get(t, base+"/health/workers")
	assert.NotContains(t, plain, "memory_trend", "only when asked")

	// A page has a trend on each of its rows (at most pages.MaxRows), the
	// same as the whole list's.
	code, body = get(t, base+"/health/workers?trend=1&limit=2")
	require.Equal(t, http.StatusOK, code)
	list.Workers = nil
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Workers, 2)
	for _, w := range list.Workers {
		assert.Len(t, w.Trend, pages.TrendPoints, w.ID)
	}
	assert.Equal(t, l.id, list.Workers[0].ID)
	assert.Equal(t, tr, list.Workers[0].Trend)
}

// tableRowsOf is the body rows of table (an "empty" row of one cell left out).
func tableRowsOf(t *testing.T, table *html.Node) []domRow {
	t.Helper()
	require.NotNil(t, table)
	tbody := findAll(table, "tbody")
	require.Len(t, tbody, 1)
	var rows []domRow
	for _, tr := range findAll(tbody[0], "tr") {
		if cells := findAll(tr, "td"); len(cells) > 1 {
			rows = append(rows, domRow{node: tr, cells: cells})
		}
	}
	return rows
}

// A history younger than the window (the collector just started) is drawn
// over its own age, not squeezed into the right edge of half an hour; a
// chart without data says so; a count axis has whole numbers.
func TestWorkerPageYoungHistory(t *testing.T) {
	now := time.Now().Truncate(10 * time.Second)
	wh := newTestExt(t)
	wh.now = func() time.Time { return now }
	publishHistory(wh, now.Add(-90*time.Second), now, func(at time.Time) []contract.Worker {
		w := worker("young", contract.Healthy)
		w.CPU.MainCores = -1
		w.Runs.Worker, w.Runs.Capacity = []string{"r1", "r2", "r3"}, 0
		w.Memory.RSSBytes += int64(at.Sub(now)/time.Second) << 20
		return []contract.Worker{w}
	})
	base := startTestExt(t, wh)
	_, body := get(t, base+"/workers/young")
	doc, err := html.Parse(strings.NewReader(body))
	require.NoError(t, err)

	mem := findByID(doc, "chart-memory")
	require.NotNil(t, mem)
	var xlabels []string
	for _, l := range findAll(mem, "text") {
		if attr(l, "text-anchor") == "middle" {
			xlabels = append(xlabels, text(l))
		}
	}
	assert.Equal(t, []string{"−2m", "−1m", "−40s", "now"}, xlabels, "two minutes, the shortest span drawn")
	var tree [][2]float64
	for _, p := range findAll(mem, "polyline") {
		if attr(p, "data-series") == "tree" {
			tree = points(t, attr(p, "points"))
		}
	}
	require.Len(t, tree, 10)
	assert.InDelta(t, pages.PlotLeft+(pages.PlotRight-pages.PlotLeft)*30.0/120, tree[0][0], 0.11, "the first sample, 90 s ago, a quarter in")
	assert.Contains(t, body, "<h2>The last 2m</h2>")

	cpu := findByID(doc, "chart-cpu")
	require.NotNil(t, cpu)
	assert.Empty(t, findAll(cpu, "polyline"))
	assert.Contains(t, text(cpu), "not reported")

	var grid []string
	for _, l := range findAll(findByID(doc, "chart-runs"), "text") {
		if attr(l, "text-anchor") == "end" {
			grid = append(grid, text(l))
		}
	}
	assert.Equal(t, []string{"0", "3", "6"}, grid, "3 runs: a round top (5) made even, the middle line a whole number")
}
