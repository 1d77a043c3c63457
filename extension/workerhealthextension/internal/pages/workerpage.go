package pages // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/pages"

import (
	"cmp"
	_ "embed"
	"html/template"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// The worker page, GET /workers/{id}: the fleet page's row for one worker,
// with its recent history drawn as small SVG charts rendered here (no script,
// no external asset; the fleet page's Content-Security-Policy), the timeline
// of its state transitions, its recent runs and the ids each source knows it
// by. It reloads itself every page_refresh with a meta refresh.

//go:embed assets/worker.html.tmpl
var workerTemplate string

type workerPageData struct {
	CSS            template.CSS
	RefreshSeconds int
	// Up leads from the page back to the root: the id may hold slashes.
	Up, PathID   string
	ID, Name     string
	NotUTF8      bool
	State        contract.State
	MayTakeWork  bool
	Since        string
	LastSeen     string
	Reasons      []pageReason
	Incarnation  string
	LastExit     string
	MemText      string
	CPUText      string
	RunsText     string
	WorkerRuns   string
	SchedRuns    string
	Drift        string
	DriftBad     bool
	Window       string
	Charts       []chart
	Transitions  []pageTransition
	Recent       []pageRun
	Kills        string
	Sources      []pageSource
	HistoryEmpty bool
	HistoryOff   bool // history::window: 0
}

type pageTransition struct {
	At, Ago  string
	From, To contract.State
	Reasons  []pageReason
}

type pageRun struct {
	ID, Attempt, Result, Kill, Duration, Ended string
}

type pageSource struct {
	Name     string
	Seen     bool
	LastSeen string
	IDs      string
}

func (p *Pages) workerData(w *contract.Worker, ws history.Series, now time.Time, window, res time.Duration) workerPageData {
	d := workerPageData{
		CSS:            template.CSS(pageCSS), //nolint:gosec // our own embedded stylesheet, not data
		RefreshSeconds: max(1, int(p.refresh/time.Second)),
		PathID:         url.PathEscape(w.ID),
		Name:           w.Name,
		State:          w.State,
		MayTakeWork:    w.State.MayTakeWork(),
		Since:          since(w.Since.Time(), now),
		LastSeen:       ago(w.LastSeen.Time(), now),
		CPUText:        cpuText(w.CPU),
		RunsText:       runsText(w.Runs),
		WorkerRuns:     listText(w.Runs.Worker),
		SchedRuns:      listText(w.Runs.Scheduler),
		Window:         dur(window),
		Kills:          killsText(w.Runs.Kills),
		HistoryEmpty:   len(ws.Samples) == 0,
		HistoryOff:     window == 0,
	}
	d.ID, d.NotUTF8 = shownID(w.ID)
	for _, r := range w.Reasons {
		d.Reasons = append(d.Reasons, pageReason{Code: r.Code, Message: r.Message, Evidence: evidence(r)})
	}
	d.Incarnation = incarnationText(w.Incarnation, now)
	d.LastExit = lastExitText(w.LastExit, now)
	_, _, d.MemText = memoryCell(w, now)
	d.Drift, _, d.DriftBad = driftText(w.Drift)

	from := now.Add(-window)
	if !d.HistoryEmpty {
		d.Charts = historyCharts(ws, from, now, res)
	}
	for i := len(ws.Transitions) - 1; i >= 0; i-- { // newest first
		t := ws.Transitions[i]
		at := time.UnixMilli(t.At)
		pt := pageTransition{At: at.UTC().Format("15:04:05 UTC"), Ago: ago(at, now), From: history.StateOf(t.From), To: history.StateOf(t.To)}
		for _, r := range t.Reasons[:t.NReasons] {
			pt.Reasons = append(pt.Reasons, pageReason{Code: r.Code, Evidence: evidence(contract.Reason{Code: r.Code, Value: r.Value, Threshold: r.Threshold})})
		}
		d.Transitions = append(d.Transitions, pt)
	}
	for r := range w.Runs.Recent.All() {
		pr := pageRun{ID: r.ID, Attempt: "–", Result: cmp.Or(r.Result, "–"), Kill: cmp.Or(r.KillReason, "–"), Duration: "–", Ended: "–"}
		if r.Attempt > 0 {
			pr.Attempt = strconv.Itoa(r.Attempt)
		}
		if !r.Ended.IsZero() {
			pr.Ended = ago(r.Ended, now)
		}
		if r.DurationSeconds > 0 {
			pr.Duration = runDuration(r.DurationSeconds)
		}
		d.Recent = append(d.Recent, pr)
	}
	for _, s := range []struct {
		name string
		src  contract.Source
	}{{"process tree", w.Sources.Tree()}, {"own telemetry", w.Sources.Telemetry()}, {"scheduler", w.Sources.Scheduler()}} {
		d.Sources = append(d.Sources, pageSource{Name: s.name, Seen: s.src.Seen, LastSeen: ago(s.src.LastSeen.Time(), now), IDs: listText(s.src.IDs.List())})
	}
	return d
}

func cpuText(c contract.CPU) string {
	if c.MainCores < 0 {
		return "not reported"
	}
	s := formatNum(c.MainCores) + " cores (main process)"
	if c.LimitCPUs > 0 {
		s += " / limit " + formatNum(c.LimitCPUs)
	}
	return s
}

func listText(l []string) string {
	if len(l) == 0 {
		return "–"
	}
	return strings.Join(l, ", ")
}

func killsText(k map[string]int64) string {
	if len(k) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(k))
	for _, reason := range slices.Sorted(maps.Keys(k)) {
		parts = append(parts, reason+" "+strconv.FormatInt(k[reason], 10))
	}
	return strings.Join(parts, " · ")
}

func runDuration(s float64) string {
	if s < 10 {
		return strconv.FormatFloat(s, 'f', 1, 64) + "s"
	}
	return dur(time.Duration(s * float64(time.Second)))
}
