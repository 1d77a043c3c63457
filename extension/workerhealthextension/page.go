package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// The page is a template and a small script, embedded: no JavaScript build
// step, and html/template escapes every worker-provided string by context.
var (
	//go:embed assets/page.html.tmpl
	pageTemplate string
	//go:embed assets/page.js
	pageScript string
	//go:embed assets/page.css
	pageCSS string
)

// pageMaxRows bounds the rows the page shows (worst first): past that a
// table is not read by anyone, and a 10,000-row page costs the collector
// half a second to render and the browser far more to lay out every refresh.
// The JSON list has no such limit.
const pageMaxRows = 1000

// page renders the status page. The Content-Security-Policy allows only this
// exact script (by hash) and requests to this origin: even if a worker id got
// past escaping, the browser would refuse to run it.
type page struct {
	tmpl    *template.Template
	worker  *template.Template
	refresh time.Duration
	csp     []string
	now     func() time.Time
}

func newPage(refresh time.Duration) (*page, error) {
	tmpl, err := template.New("page").Parse(pageTemplate)
	if err != nil {
		return nil, err
	}
	worker, err := template.New("worker").Parse(workerTemplate)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(pageScript))
	csp := "default-src 'none'; script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return &page{tmpl: tmpl, worker: worker, refresh: refresh, csp: []string{csp}, now: time.Now}, nil
}

func (wh *workerHealth) handlePage(w http.ResponseWriter, r *http.Request) int {
	keep, err := store.ParseStateFilter(r.URL.Query()["state"])
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error())
	}
	return wh.page.render(w, wh.page.tmpl, wh.page.data(wh.viewFor(r), keep, wh.history), "the status page")
}

// render executes tmpl into a buffer (a failure is a clean 500, not half a
// page) and sends it with the page's Content-Security-Policy.
func (p *page) render(w http.ResponseWriter, tmpl *template.Template, data any, what string) int {
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		return writeError(w, http.StatusInternalServerError, "cannot render "+what)
	}
	h := w.Header()
	h["Content-Type"] = hdrHTML
	h["Content-Security-Policy"] = p.csp
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
	return http.StatusOK
}

type pageData struct {
	CSS              template.CSS
	RefreshSeconds   int
	RefreshMillis    int64
	Updated          string
	Counts           []pageCount
	Total            int
	Filtered         bool
	FleetText        string
	IdleWhilePending bool
	Rows             []pageRow
	Shown, Matching  int
	MaxRows          int
	StaleMillis      int64
	Script           template.JS
}

type pageCount struct {
	State  contract.State
	N      int
	Active bool
}

type pageRow struct {
	// ID is the id as shown (see shownID); NotUTF8 marks an escaped one.
	ID, PathID, Name string
	NotUTF8          bool
	State            contract.State
	Since            string
	Reasons          []pageReason
	MemPct           int
	Trend            template.HTML
	MemClass         string
	MemText          string
	Runs             string
	Drift            string
	DriftTitle       string
	DriftBad         bool
	LastSeen         string
}

type pageReason struct{ Code, Message, Evidence string }

func (p *page) data(v *store.View, keep store.StateFilter, hs *history.Store) pageData {
	now := p.now()
	d := pageData{
		CSS:              template.CSS(pageCSS), //nolint:gosec // our own embedded stylesheet, not data
		RefreshSeconds:   max(1, int(p.refresh/time.Second)),
		RefreshMillis:    p.refresh.Milliseconds(),
		Filtered:         keep != nil,
		FleetText:        fleetText(v.Fleet),
		IdleWhilePending: v.Fleet.IdleWhilePending,
		MaxRows:          pageMaxRows,
		StaleMillis:      staleMemoryAfter.Milliseconds(),
		Script:           template.JS(pageScript), //nolint:gosec // our own embedded script, not data
	}
	if v.Time.IsZero() {
		d.Updated = "no state published yet"
	} else {
		n := len(v.Sources)
		d.Updated = "evaluated " + ago(v.Time, now) + " · " + strconv.Itoa(n) + plural(n, " source", " sources")
	}
	for _, st := range contract.AllStates {
		n := v.Fleet.ByState[st]
		d.Total += n
		d.Counts = append(d.Counts, pageCount{State: st, N: n, Active: keep != nil && keep[st]})
	}
	d.Matching = v.Count(keep)
	ids := make([]string, 0, min(d.Matching, pageMaxRows))
	d.Rows = make([]pageRow, 0, cap(ids))
	for _, e := range v.WorstFirst {
		if len(d.Rows) == pageMaxRows {
			break
		}
		if keep.Has(e.Worker.State) {
			d.Rows = append(d.Rows, newPageRow(e.Worker, now))
			ids = append(ids, e.Worker.ID)
		}
	}
	d.Shown = len(d.Rows)
	for i, t := range hs.Trend(ids, now, trendPoints) {
		d.Rows[i].Trend = newSparkline(t, v.ByID[ids[i]].Worker.Memory.SoftLimitBytes)
	}
	return d
}

// trendPoints is how many points a row's memory trend has: one a minute
// over the default 30-minute window.
const trendPoints = 30

// newSparkline draws a row's memory trend (history.trend: bytes per point,
// -1 none) as an SVG in a 100x20 box stretched to the cell: the tree's
// memory over the history window, and its soft limit as a dashed line. The
// scale goes up to the larger of the trend's top and the soft limit, so a
// worker near its limit looks near it. assets/page.js draws the same.
//
// It is built here rather than in the template: a thousand rows of
// attribute escaping cost more than the rest of the page, and the SVG holds
// only numbers and our own words.
func newSparkline(trend []int64, soft int64) template.HTML {
	top, n := max(soft, 0), 0
	for _, v := range trend {
		if v >= 0 {
			top, n = max(top, v), n+1
		}
	}
	if n == 0 || top <= 0 {
		return ""
	}
	scale := 18 / float64(top)
	label := "tree memory over the history window, up to " + formatBytes(float64(top))
	var b strings.Builder
	b.Grow(64 + 12*len(trend))
	b.WriteString(`<svg class="trend" viewBox="0 0 100 20" preserveAspectRatio="none" role="img" aria-label="`)
	b.WriteString(label)
	b.WriteString(`"><title>`)
	b.WriteString(label)
	b.WriteString(`</title>`)
	if soft > 0 {
		y := px(19 - float64(soft)*scale)
		b.WriteString(`<line x1="0" x2="100" y1="` + y + `" y2="` + y + `"></line>`)
	}
	b.WriteString(`<polyline points="`)
	first := true
	for i, v := range trend {
		if v < 0 {
			continue
		}
		if !first {
			b.WriteByte(' ')
		}
		first = false
		b.WriteString(px(float64(i) * 100 / float64(max(1, len(trend)-1))))
		b.WriteByte(',')
		b.WriteString(px(19 - float64(v)*scale))
	}
	b.WriteString(`"></polyline></svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and our own words only, no worker data
}

// The formatting below is mirrored by assets/page.js, which re-renders the
// rows from JSON; keep the two in step.

func newPageRow(w *contract.Worker, now time.Time) pageRow {
	row := pageRow{
		PathID:   url.PathEscape(w.ID),
		Name:     w.Name,
		State:    w.State,
		Since:    since(w.Since, now),
		Runs:     runsText(w.Runs),
		LastSeen: ago(w.LastSeen, now),
	}
	row.ID, row.NotUTF8 = shownID(w.ID)
	for _, r := range w.Reasons {
		row.Reasons = append(row.Reasons, pageReason{Code: r.Code, Message: r.Message, Evidence: evidence(r)})
	}
	row.MemPct, row.MemClass, row.MemText = memoryCell(w, now)
	row.Drift, row.DriftTitle, row.DriftBad = driftText(w.Drift)
	return row
}

// shownID is how a page shows an id: as it is, or URL-escaped when it is not
// valid UTF-8 (a browser would show every invalid byte as the same U+FFFD,
// so two such ids would look alike). It is the id_escaped of the JSON.
func shownID(id string) (string, bool) {
	if utf8.ValidString(id) {
		return id, false
	}
	return url.PathEscape(id), true
}

func fleetText(f contract.Fleet) string {
	p := "not reported"
	if f.Pending >= 0 {
		p = strconv.FormatInt(f.Pending, 10)
	}
	return "pending work: " + p + " · idle capacity: " + strconv.FormatInt(f.IdleCapacity, 10)
}

var units = []string{"B", "KiB", "MiB", "GiB", "TiB"}

func formatBytes(n float64) string {
	i, v := 0, n
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 || v >= 100 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64) + " " + units[i]
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}

func formatNum(f float64) string {
	if f == math.Round(f) {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

func dur(d time.Duration) string {
	s := max(0, int64(d/time.Second))
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return strconv.FormatInt(s/60, 10) + "m"
	case s < 86400:
		return strconv.FormatInt(s/3600, 10) + "h " + strconv.FormatInt(s%3600/60, 10) + "m"
	default:
		return strconv.FormatInt(s/86400, 10) + "d " + strconv.FormatInt(s%86400/3600, 10) + "h"
	}
}

func ago(t, now time.Time) string {
	if t.IsZero() || t.Unix() <= 0 {
		return "never"
	}
	return dur(now.Sub(t)) + " ago"
}

func since(t, now time.Time) string {
	if t.IsZero() || t.Unix() <= 0 {
		return "–"
	}
	return dur(now.Sub(t))
}

func evidence(r contract.Reason) string {
	if r.Value == 0 && r.Threshold == 0 {
		return ""
	}
	f := formatNum
	if strings.Contains(r.Code, "memory") {
		f = formatBytes
	}
	return f(r.Value) + " / " + f(r.Threshold)
}

// staleMemoryAfter: a tree sampled longer ago than this shows its memory as
// the last known, greyed, with the sample's age. The receiver samples every
// few seconds (collection_interval, 3 s in the default config), so a minute
// without a sample means the figure is history, as it is for a lost worker.
const staleMemoryAfter = time.Minute

// memoryCell is memoryText, and a worker whose memory is not current (lost,
// or no sample for staleMemoryAfter) greyed with the age of its last sample.
func memoryCell(w *contract.Worker, now time.Time) (pct int, class, text string) {
	m := w.Memory
	if m.SampledAt.IsZero() && m.RSSBytes == 0 {
		return 0, "none", "no sample yet"
	}
	pct, class, text = memoryText(m)
	switch {
	case !m.SampledAt.IsZero() && (w.State == contract.Lost || now.Sub(m.SampledAt) > staleMemoryAfter):
		class, text = "stale", text+" · last sample "+ago(m.SampledAt, now)
	case w.State == contract.Lost: // a publisher that does not say when
		class, text = "stale", text+" · last known"
	}
	return pct, class, text
}

func memoryText(m contract.Memory) (pct int, class, text string) {
	if m.SoftLimitBytes <= 0 {
		return 0, "none", formatBytes(float64(m.RSSBytes)) + " (no soft limit)"
	}
	ratio := float64(m.RSSBytes) / float64(m.SoftLimitBytes)
	p := int(math.Round(ratio * 100))
	switch {
	case ratio > 1:
		class = "over"
	case ratio >= 0.8:
		class = "warn"
	default:
		class = "ok"
	}
	return min(100, p), class, formatBytes(float64(m.RSSBytes)) + " / " + formatBytes(float64(m.SoftLimitBytes)) + " (" + strconv.Itoa(p) + "%)"
}

func runsText(r contract.Runs) string {
	s := "worker " + strconv.Itoa(len(r.Worker)) + " · scheduler " + strconv.Itoa(len(r.Scheduler))
	if r.Capacity > 0 {
		s += " · cap " + strconv.Itoa(r.Capacity)
	}
	return s
}

func driftText(d contract.Drift) (text, title string, bad bool) {
	var parts, titles []string
	if len(d.Missing) > 0 {
		parts = append(parts, "missing "+strconv.Itoa(len(d.Missing)))
		titles = append(titles, "missing: "+strings.Join(d.Missing, ", "))
	}
	if len(d.Orphaned) > 0 {
		parts = append(parts, "orphaned "+strconv.Itoa(len(d.Orphaned)))
		titles = append(titles, "orphaned: "+strings.Join(d.Orphaned, ", "))
	}
	if d.OverCapacity > 0 {
		parts = append(parts, "over capacity "+strconv.Itoa(d.OverCapacity))
	}
	if len(parts) == 0 {
		return "none", "", false
	}
	return strings.Join(parts, " · "), strings.Join(titles, "\n"), true
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
