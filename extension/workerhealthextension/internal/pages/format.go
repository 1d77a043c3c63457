package pages // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"

import (
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The formatting is mirrored by assets/page.js, which re-renders the
// rows from JSON; keep the two in step.

func newPageRow(w *contract.Worker, now time.Time) pageRow {
	row := pageRow{
		PathID:   url.PathEscape(w.ID),
		Name:     w.Name,
		State:    w.State,
		Since:    since(w.Since.Time(), now),
		Runs:     runsText(w.Runs),
		LastSeen: ago(w.LastSeen.Time(), now),
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

// evidence is a reason's figures: those when it fired ("value / threshold",
// the samples), and on a latched reason the value now, marked latched, and
// its recovery progress, so that a value on the wrong side of its threshold
// is never shown without saying why. A process_exited reason says how the
// root ended.
func evidence(r contract.Reason) string {
	if r.Exit != nil {
		return r.Exit.Text()
	}
	if r.Value == 0 && r.Threshold == 0 && !r.Latched {
		return ""
	}
	f := formatNum
	if strings.Contains(r.Code, "memory") {
		f = formatBytes
	}
	s := f(r.Value) + " / " + f(r.Threshold)
	if r.Samples > 0 {
		s += " · " + strconv.Itoa(r.Samples) + plural(r.Samples, " sample", " samples")
	}
	if !r.Latched {
		return s
	}
	s = "fired at " + s + " · latched"
	if r.Current != nil {
		s += " · now " + f(*r.Current)
	}
	if rc := r.Recovery; rc != nil {
		s += " · recovering: " + strconv.Itoa(rc.Samples) + " of " + strconv.Itoa(rc.Needed) +
			" samples under " + formatNum(math.Round(rc.Ratio*1000)/10) + " %"
	}
	return s
}

// incarnationText is the worker's current incarnation: its process and
// when it started, and what it was taken from.
func incarnationText(in *contract.Incarnation, now time.Time) string {
	if in == nil {
		return "not known yet"
	}
	var s string
	switch in.Source {
	case contract.IncarnationServiceInstance:
		s = "service.instance.id " + in.ID
	default:
		s = "pid " + strconv.FormatInt(in.PID, 10)
	}
	if !in.Started.IsZero() {
		s += ", started " + in.Started.Time().Format("2006-01-02 15:04:05 UTC") + " (" + ago(in.Started.Time(), now) + ")"
	} else if !in.FirstSeen.IsZero() {
		s += ", first seen " + ago(in.FirstSeen.Time(), now)
	}
	switch in.Source {
	case contract.IncarnationTree:
		s += " · from the process tree"
	case contract.IncarnationProcess:
		s += " · from the worker's telemetry (process.pid)"
	case contract.IncarnationServiceInstance:
		s += " · from the worker's telemetry"
	}
	return s
}

// lastExitText is how the previous incarnation ended ("" when unknown).
func lastExitText(e *contract.Exit, now time.Time) string {
	if e == nil {
		return ""
	}
	s := e.Text()
	if e.Incarnation != "" {
		s += " (" + e.Incarnation + ")"
	}
	if !e.At.IsZero() {
		s += ", " + ago(e.At, now)
	}
	return s
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
	case !m.SampledAt.IsZero() && (w.State == contract.Lost || now.Sub(m.SampledAt.Time()) > staleMemoryAfter):
		class, text = "stale", text+" · last sample "+ago(m.SampledAt.Time(), now)
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
	if len(d.Missing()) > 0 {
		parts = append(parts, "missing "+strconv.Itoa(len(d.Missing())))
		titles = append(titles, "missing: "+strings.Join(d.Missing(), ", "))
	}
	if len(d.Orphaned()) > 0 {
		parts = append(parts, "orphaned "+strconv.Itoa(len(d.Orphaned())))
		titles = append(titles, "orphaned: "+strings.Join(d.Orphaned(), ", "))
	}
	if d.OverCapacity() > 0 {
		parts = append(parts, "over capacity "+strconv.Itoa(d.OverCapacity()))
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
