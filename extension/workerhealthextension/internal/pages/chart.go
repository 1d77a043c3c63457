package pages // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"

import (
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// The SVG: the fleet page's memory trend per row (newSparkline) and the
// worker page's history charts (historyCharts).

const TrendPoints = 30

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

// PlotLeft and PlotRight are the x of a chart's plot area: a sample at the
// start of the span is drawn at PlotLeft, one at its end at PlotRight.
const (
	PlotLeft  = 64 // room for the y labels
	PlotRight = 712
)

// The charts. Coordinates are in the SVG's own units; the CSS scales it to
// the page's width.
const (
	chartW  = 720
	chartH  = 150
	plotL   = PlotLeft
	plotR   = PlotRight
	plotT   = 8
	plotB   = 122 // the state band and the x labels below
	bandTop = 126
	bandH   = 6
)

type chart struct {
	Title string
	ID    string // the element id, for tests and links
	// Empty: no series has a value in the span (e.g. CPU not reported).
	Empty   bool
	Grid    []chartLabel
	XLabels []chartLabel
	Lines   []chartLine
	Bands   []chartBand
	Marks   []chartMark
	Key     []chartKey
}

type chartLine struct {
	Class, Points, Series string
}

type chartBand struct {
	X, W  string
	State contract.State
}

type chartMark struct {
	X, At, Title string
	State        contract.State
}

type chartLabel struct {
	X, Y, Text string
}

type chartKey struct {
	Class, Text string
	Limit       bool
}

// series is one line of a chart: its value in a sample, if it has one.
type series struct {
	name  string
	class string
	limit bool
	value func(history.Sample) (float64, bool)
}

func historyCharts(ws history.Series, from, now time.Time, res time.Duration) []chart {
	mem := []series{
		{"tree", "c0", false, func(s history.Sample) (float64, bool) { return float64(s.RSSKiB) * 1024, true }},
		{"tree soft limit", "c0", true, func(s history.Sample) (float64, bool) { return float64(s.SoftKiB) * 1024, s.SoftKiB > 0 }},
	}
	for j, role := range ws.Roles {
		bit := uint8(1) << j
		class := "c" + strconv.Itoa(1+j%5)
		mem = append(mem,
			series{role, class, false, func(s history.Sample) (float64, bool) { return float64(s.RoleRSS[j]) * 1024, s.RoleMask&bit != 0 }},
			series{role + " soft limit", class, true, func(s history.Sample) (float64, bool) {
				return float64(s.RoleSoft[j]) * 1024, s.RoleMask&bit != 0 && s.RoleSoft[j] > 0
			}})
	}
	cpu := []series{
		{"main process", "c1", false, func(s history.Sample) (float64, bool) { return float64(s.CPUMain), s.CPUMain >= 0 }},
		{"CPU limit", "c0", true, func(s history.Sample) (float64, bool) { return float64(s.CPULimit), s.CPULimit > 0 }},
	}
	runs := []series{
		{"held by the worker", "c1 wide", false, func(s history.Sample) (float64, bool) { return float64(s.RunsWorker), true }},
		{"held by the scheduler", "c3", false, func(s history.Sample) (float64, bool) { return float64(s.RunsScheduler), true }},
		{"capacity", "c0", true, func(s history.Sample) (float64, bool) { return float64(s.Capacity), s.Capacity > 0 }},
	}
	bytesAxis := axis{unit: 1 << 20, label: formatBytes}
	coresAxis := axis{unit: 1, label: func(f float64) string { return formatNum(roundTo(f, 2)) }}
	countAxis := axis{unit: 1, integer: true, label: func(f float64) string { return strconv.FormatFloat(f, 'f', 0, 64) }}
	return []chart{
		drawChart("Memory per role against the soft limits", "chart-memory", ws, mem, from, now, res, bytesAxis),
		drawChart("CPU of the main process (cores)", "chart-cpu", ws, cpu, from, now, res, coresAxis),
		drawChart("Runs held by each view, and capacity", "chart-runs", ws, runs, from, now, res, countAxis),
	}
}

// axis is how a chart's y axis counts: the top is a round number of units
// (MiB for memory) above the largest value, an even one for counts so the
// middle line is a whole number too.
type axis struct {
	unit    float64
	integer bool
	label   func(float64) string
}

// drawChart draws ss over [from, now].
func drawChart(title, id string, ws history.Series, ss []series, from, now time.Time, res time.Duration, ax axis) chart {
	c := chart{Title: title, ID: id}
	span := float64(now.Sub(from).Milliseconds())
	x := func(at int64) float64 {
		return plotL + (plotR-plotL)*min(1, max(0, float64(at-from.UnixMilli())/span))
	}
	top := 0.0
	for _, s := range ss {
		for _, smp := range ws.Samples {
			if v, ok := s.value(smp); ok {
				top = max(top, v)
			}
		}
	}
	top = niceTop(top*1.08/ax.unit) * ax.unit
	if ax.integer {
		top = max(2, 2*math.Ceil(top/2))
	}
	y := func(v float64) float64 { return plotB - (plotB-plotT)*v/top }
	for _, f := range []float64{0, 0.5, 1} {
		c.Grid = append(c.Grid, chartLabel{X: px(plotL - 6), Y: px(y(top * f)), Text: ax.label(top * f)})
	}
	for i := range 4 {
		at := from.Add(time.Duration(i) * now.Sub(from) / 3)
		text := "now"
		if i < 3 {
			text = "−" + dur(now.Sub(at))
		}
		c.XLabels = append(c.XLabels, chartLabel{X: px(x(at.UnixMilli())), Y: px(chartH - 2), Text: text})
	}

	// A line breaks where samples are missing (the worker was not
	// published, or the collector was down), rather than drawing across.
	gap := 5 * res.Milliseconds() / 2
	for _, s := range ss {
		var pts []string
		prev := int64(0)
		flush := func() {
			if len(pts) > 0 {
				c.Lines = append(c.Lines, chartLine{Class: s.class + limitClass(s.limit), Points: strings.Join(pts, " "), Series: s.name})
			}
			pts = pts[:0:0]
		}
		drawn := false
		for _, smp := range ws.Samples {
			v, ok := s.value(smp)
			if !ok || (len(pts) > 0 && smp.At-prev > gap) {
				flush()
			}
			if ok {
				pts = append(pts, px(x(smp.At))+","+px(y(v)))
				drawn = true
			}
			prev = smp.At
		}
		flush()
		if drawn {
			c.Key = append(c.Key, chartKey{Class: strings.Fields(s.class)[0], Text: s.name, Limit: s.limit})
		}
	}
	c.Empty = len(c.Key) == 0
	// The verdicts laid over the data: a band of the state at each sample,
	// and a mark at each transition.
	// (One rect per run of samples in one state, without gaps.)
	var band struct {
		state    uint8
		from, to int64
	}
	flushBand := func() {
		if band.to > band.from {
			x0, x1 := x(band.from), x(band.to)
			c.Bands = append(c.Bands, chartBand{X: px(x0), W: px(max(0.5, x1-x0)), State: history.StateOf(band.state)})
		}
	}
	for i, smp := range ws.Samples {
		end := smp.At + res.Milliseconds()
		if i+1 < len(ws.Samples) && ws.Samples[i+1].At-smp.At <= gap {
			end = ws.Samples[i+1].At
		}
		if smp.State != band.state || smp.At != band.to {
			flushBand()
			band.state, band.from = smp.State, smp.At
		}
		band.to = end
	}
	flushBand()
	for _, t := range ws.Transitions {
		if t.At < from.UnixMilli() {
			continue
		}
		at := time.UnixMilli(t.At).UTC()
		parts := []string{"→ " + string(history.StateOf(t.To)) + " at " + at.Format("15:04:05 UTC")}
		for _, r := range t.Reasons[:t.NReasons] {
			parts = append(parts, r.Code)
		}
		title := strings.Join(parts, "; ")
		c.Marks = append(c.Marks, chartMark{X: px(x(t.At)), At: at.Format(time.RFC3339), Title: title, State: history.StateOf(t.To)})
	}
	return c
}

func limitClass(limit bool) string {
	if limit {
		return " limit"
	}
	return ""
}

// niceTop rounds a chart's top up to 1, 2, 2.5 or 5 times a power of ten,
// so the labels are round.
func niceTop(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for p > v {
		p /= 10
	}
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func roundTo(f float64, digits int) float64 {
	s := strconv.FormatFloat(f, 'f', digits, 64)
	r, _ := strconv.ParseFloat(s, 64)
	return r
}

func px(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }
