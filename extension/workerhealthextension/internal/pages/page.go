// Package pages renders the HTML the extension serves: the fleet status
// page at / and the page of each worker at /workers/{id}, with their SVG
// (the rows' memory trends, the worker's history charts) drawn here and one
// small embedded script. html/template escapes every worker-provided string;
// the Content-Security-Policy (CSP) allows only that script. It reads the
// store's view and the history; it writes no HTTP response itself.
package pages // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"html/template"
	"strconv"
	"strings"
	"time"

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

// MaxRows bounds the rows the page shows (worst first): past that a
// table is not read by anyone, and a 10,000-row page costs the collector
// half a second to render and the browser far more to lay out every refresh.
// The JSON list has no such limit.
const MaxRows = 1000

// Pages renders the status page and the worker pages. The Content-Security-Policy allows only this
// exact script (by hash) and requests to this origin: even if a worker id got
// past escaping, the browser would refuse to run it.
type Pages struct {
	tmpl    *template.Template
	worker  *template.Template
	refresh time.Duration
	csp     []string
}

// New parses the templates; refresh is page_refresh.
func New(refresh time.Duration) (*Pages, error) {
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
	return &Pages{tmpl: tmpl, worker: worker, refresh: refresh, csp: []string{csp}}, nil
}

// CSP is the Content-Security-Policy header value every page is sent with.
func (p *Pages) CSP() []string { return p.csp }

// Script is the page's embedded script, the one the CSP allows by hash.
func Script() string { return pageScript }

// Fleet renders the status page of v, filtered by keep, at now.
func (p *Pages) Fleet(v *store.View, keep store.StateFilter, hs *history.Store, now time.Time) ([]byte, error) {
	return execute(p.tmpl, p.data(v, keep, hs, now))
}

// Worker renders the page of w, whose id is escapedID in the path, at now.
func (p *Pages) Worker(w *contract.Worker, escapedID string, hs *history.Store, now time.Time) ([]byte, error) {
	span := hs.Span(now)
	d := p.workerData(w, hs.Series(w.ID, now.Add(-span)), now, span, hs.Resolution())
	d.Up = strings.Repeat("../", 1+strings.Count(escapedID, "/"))
	return execute(p.worker, d)
}

// execute renders into a buffer: a failure is a clean error, not half a page.
func execute(tmpl *template.Template, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
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

func (p *Pages) data(v *store.View, keep store.StateFilter, hs *history.Store, now time.Time) pageData {
	d := pageData{
		CSS:              template.CSS(pageCSS), //nolint:gosec // our own embedded stylesheet, not data
		RefreshSeconds:   max(1, int(p.refresh/time.Second)),
		RefreshMillis:    p.refresh.Milliseconds(),
		Filtered:         keep != nil,
		FleetText:        fleetText(v.Fleet),
		IdleWhilePending: v.Fleet.IdleWhilePending,
		MaxRows:          MaxRows,
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
	ids := make([]string, 0, min(d.Matching, MaxRows))
	limits := make([]int64, 0, cap(ids)) // each row's soft limit, for its trend
	d.Rows = make([]pageRow, 0, cap(ids))
	for _, e := range v.WorstFirst {
		if len(d.Rows) == MaxRows {
			break
		}
		if keep.Has(e.Worker.State) {
			d.Rows = append(d.Rows, newPageRow(e.Worker, now))
			ids = append(ids, e.Worker.ID)
			limits = append(limits, e.Worker.Memory.SoftLimitBytes)
		}
	}
	d.Shown = len(d.Rows)
	for i, t := range hs.Trend(ids, now, TrendPoints) {
		d.Rows[i].Trend = newSparkline(t, limits[i])
	}
	return d
}

// TrendPoints is how many points a row's memory trend has: one a minute
// over the default 30-minute window.
