package workerhealthextension

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"
	"github.com/workerwatch/workerwatch/internal/contract"
)

const scriptID = "<script>alert(1)</script>"

func TestPageServerRendered(t *testing.T) {
	wh := newTestExt(t)
	wh.now = func() time.Time { return t0 }
	base := startTestExt(t, wh)

	// Before any publish: an empty fleet, not an error.
	code, body := get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "No workers yet")

	bad := worker(scriptID, contract.Unhealthy)
	bad.Name = `"><img src=x onerror=alert(2)>`
	bad.Reasons = []contract.Reason{{Code: "memory_over_soft_limit", Message: "<b>over</b>", Value: 612 << 20, Threshold: 500 << 20}}
	bad.Memory.RSSBytes = 612 << 20
	bad.Drift = contract.NewDrift(contract.DriftDetail{Missing: []string{"run-<7>"}})
	publish(wh, snapshot(testSource, t0.Add(-3*time.Second),
		worker("a/b c", contract.Healthy), bad, worker("ünï", contract.Degraded), worker("z", contract.Lost)))

	resp, err := http.Get(base + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	sum := sha256.Sum256([]byte(pages.Script()))
	assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")

	doc, err := html.Parse(resp.Body)
	require.NoError(t, err)
	rows := tableRows(t, doc)
	require.Len(t, rows, 4)
	// Worst first, then id.
	assert.Equal(t, []string{"z", scriptID, "ünï", "a/b c"}, column(rows, 0, true))
	assert.Equal(t, []string{"lost", "unhealthy", "degraded", "healthy"}, column(rows, 1, true))
	assert.Equal(t, "memory_over_soft_limit 612 MiB / 500 MiB", strings.TrimSpace(text(rows[1].cells[2])))
	assert.Equal(t, "612 MiB / 500 MiB (122%)", text(findAll(rows[1].cells[3], "div")[2]))
	// One snapshot so far: the row's trend is one point, under the limit
	// line's scale (the limit is below it).
	trend := findAll(rows[1].cells[3], "svg")
	require.Len(t, trend, 1)
	assert.Equal(t, "tree memory over the history window, up to 612 MiB", attr(trend[0], "aria-label"))
	assert.Equal(t, "missing 1", text(rows[1].cells[5]))
	assert.Equal(t, "2s ago", text(rows[2].cells[6]))
	// The malicious strings are text, never elements or attributes.
	for _, r := range rows {
		assert.Empty(t, findAll(r.node, "script"))
		assert.Empty(t, findAll(r.node, "img"))
	}
	assert.Equal(t, "workers/"+"%3Cscript%3Ealert%281%29%3C%2Fscript%3E", attr(findAll(rows[1].cells[0], "a")[0], "href"))
	assert.Equal(t, `"><img src=x onerror=alert(2)>`, text(findAll(rows[1].cells[0], "div")[0]))

	// Filter and counts.
	_, body = get(t, base+"/?state=lost")
	assert.Contains(t, body, `class="chip s-lost active"`)
	assert.NotContains(t, body, "alert(1)")
	code, _ = get(t, base+"/?state=nope")
	assert.Equal(t, http.StatusBadRequest, code)
}

// The helpers below read what a parser (or a browser, through --dump-dom)
// built, not the HTML string.

type domRow struct {
	node  *html.Node
	cells []*html.Node
}

func tableRows(t testing.TB, doc *html.Node) []domRow {
	t.Helper()
	var tbody *html.Node
	for _, n := range findAll(doc, "tbody") {
		if attr(n, "id") == "rows" {
			tbody = n
		}
	}
	require.NotNil(t, tbody, "no tbody#rows")
	var rows []domRow
	for _, tr := range findAll(tbody, "tr") {
		cells := findAll(tr, "td")
		if len(cells) == 1 { // the "no workers" row
			continue
		}
		rows = append(rows, domRow{node: tr, cells: cells})
	}
	return rows
}

// column is the text of cell i of every row; firstChild takes only the
// first element's text (the id link, the state badge).
func column(rows []domRow, i int, firstChild bool) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		c := r.cells[i]
		if firstChild {
			for n := c.FirstChild; n != nil; n = n.NextSibling {
				if n.Type == html.ElementNode {
					c = n
					break
				}
			}
		}
		out = append(out, text(c))
	}
	return out
}

func findAll(n *html.Node, tag string) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == tag {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func findByID(n *html.Node, id string) *html.Node {
	if n.Type == html.ElementNode && attr(n, "id") == id {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := findByID(c, id); f != nil {
			return f
		}
	}
	return nil
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func TestPageRowLimit(t *testing.T) {
	wh := newTestExt(t)
	publish(wh, realisticFleet(pages.MaxRows+50, t0))
	base := startTestExt(t, wh)
	resp, err := http.Get(base + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	doc, err := html.Parse(resp.Body)
	require.NoError(t, err)
	assert.Len(t, tableRows(t, doc), pages.MaxRows)
	p := findByID(doc, "truncated")
	require.NotNil(t, p)
	assert.Contains(t, text(p), "Showing the 1000 most urgent of 1050 workers")
	// The worst are the ones shown: every worker that is not healthy, and
	// healthy ones only after them (the 50 cut are all healthy).
	v := wh.store.Load()
	states := column(tableRows(t, doc), 1, true)
	notHealthy := v.Count(nil) - v.Fleet.ByState[contract.Healthy]
	require.Less(t, notHealthy, pages.MaxRows)
	for i, st := range states {
		assert.Equal(t, i >= notHealthy, st == "healthy", "row %d: %s", i, st)
	}
}

// A lost worker's memory, or one not sampled for staleMemoryAfter, is its
// last known: greyed, with the age of the sample, never like a current one.
func TestPageStaleMemory(t *testing.T) {
	wh := newTestExt(t)
	wh.now = func() time.Time { return t0 }
	lost := worker("lost", contract.Lost)
	lost.Memory.SampledAt = contract.TimeOf(t0.Add(-3 * time.Minute))
	quiet := worker("quiet", contract.Healthy)
	quiet.Memory.SampledAt = contract.TimeOf(t0.Add(-2 * time.Minute))
	fresh := worker("fresh", contract.Healthy)
	fresh.Memory.SampledAt = contract.TimeOf(t0.Add(-3 * time.Second))
	never := worker("never", contract.Unknown)
	never.Memory = contract.Memory{}
	publish(wh, snapshot(testSource, t0, lost, quiet, fresh, never))
	base := startTestExt(t, wh)

	_, body := get(t, base+"/")
	doc, err := html.Parse(strings.NewReader(body))
	require.NoError(t, err)
	got := map[string][2]string{}
	for _, r := range tableRows(t, doc) {
		fill := findAll(r.cells[3], "div")[1]
		got[attr(r.node, "data-id")] = [2]string{attr(fill, "class"), text(findAll(r.cells[3], "div")[2])}
	}
	assert.Equal(t, [2]string{"fill stale", "300 MiB / 500 MiB (60%) · last sample 3m ago"}, got["lost"])
	assert.Equal(t, [2]string{"fill stale", "300 MiB / 500 MiB (60%) · last sample 2m ago"}, got["quiet"])
	assert.Equal(t, [2]string{"fill ok", "300 MiB / 500 MiB (60%)"}, got["fresh"])
	assert.Equal(t, [2]string{"fill none", "no sample yet"}, got["never"])

	_, body = get(t, base+"/workers/lost")
	assert.Contains(t, body, "<dt>memory</dt><dd>300 MiB / 500 MiB (60%) · last sample 3m ago</dd>")
}

// The note that rows are left out is only there when they are (its text
// too, not only its display: readers that ignore "hidden" read it), and it
// only suggests a filter when the page is not filtered yet.
func TestPageTruncatedOnlyWhenRowsAreLeftOut(t *testing.T) {
	wh := newTestExt(t)
	publish(wh, snapshot(testSource, t0, worker("a", contract.Healthy), worker("b", contract.Lost)))
	base := startTestExt(t, wh)
	note := func(path string) (txt string, hidden bool) {
		t.Helper()
		_, body := get(t, base+path)
		doc, err := html.Parse(strings.NewReader(body))
		require.NoError(t, err)
		p := findByID(doc, "truncated")
		require.NotNil(t, p)
		for _, a := range p.Attr {
			hidden = hidden || a.Key == "hidden"
		}
		return text(p), hidden
	}
	txt, hidden := note("/")
	assert.True(t, hidden)
	assert.Empty(t, txt, "no note when nothing is left out")

	s := realisticFleet(pages.MaxRows+50, t0)
	for i := range s.Workers {
		s.Workers[i].State = contract.Healthy
	}
	publish(wh, s)
	txt, hidden = note("/")
	assert.False(t, hidden)
	assert.Equal(t, "Showing the 1000 most urgent of 1050 workers; filter by state to see the rest, or use the JSON list.", txt)
	txt, _ = note("/?state=healthy")
	assert.Equal(t, "Showing the 1000 most urgent of 1050 workers; all of them are in the JSON list.", txt, "no filter to suggest")
	txt, hidden = note("/?state=lost")
	assert.True(t, hidden)
	assert.Empty(t, txt)
}
