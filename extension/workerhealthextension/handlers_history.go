package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// suffixHistory ends /health/workers/{id}/history. It is matched on the
// escaped path, so a worker whose id itself ends in "/history" is asked for
// with the slash escaped (.../a%2Fhistory), as every reserved byte should be.
const suffixHistory = "/history"

// historyBody is GET /health/workers/{id}/history: what the worker page
// draws, for schedulers and scripts (docs/http-api.md).
type historyBody struct {
	ID        string `json:"id"`
	IDEscaped string `json:"id_escaped,omitempty"`
	// Time is when this answer was made: the window ends here.
	Time              time.Time           `json:"time"`
	WindowSeconds     float64             `json:"window_seconds"`
	ResolutionSeconds float64             `json:"resolution_seconds"`
	Samples           []historySample     `json:"samples"`
	Transitions       []historyTransition `json:"transitions"`
	// Worker is the current judgement, as GET /health/workers/{id}: recent
	// runs, kills, sources and drift are there.
	Worker json.RawMessage `json:"worker"`
}

type historySample struct {
	Time   time.Time      `json:"time"`
	State  contract.State `json:"state"`
	Memory historyMemory  `json:"memory"`
	CPU    contract.CPU   `json:"cpu"`
	Runs   historyRuns    `json:"runs"`
}

type historyMemory struct {
	RSSBytes       int64         `json:"rss_bytes"`
	SoftLimitBytes int64         `json:"soft_limit_bytes"`
	Roles          []historyRole `json:"roles"`
}

type historyRole struct {
	Role           string `json:"role"`
	RSSBytes       int64  `json:"rss_bytes"`
	SoftLimitBytes int64  `json:"soft_limit_bytes"`
}

type historyRuns struct {
	Worker    int `json:"worker"`
	Scheduler int `json:"scheduler"`
	Capacity  int `json:"capacity"`
}

type historyTransition struct {
	Time time.Time `json:"time"`
	// From is "" for the first state the extension saw the worker in.
	From    contract.State  `json:"from"`
	To      contract.State  `json:"to"`
	Reasons []historyReason `json:"reasons"`
}

type historyReason struct {
	Code      string  `json:"code"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
}

func (wh *workerHealth) handleHistory(w http.ResponseWriter, r *http.Request, escapedID string) int {
	e, code := wh.lookup(w, escapedID)
	if e == nil {
		return code
	}
	id := e.Worker.ID
	now := wh.now()
	ws := wh.history.Series(id, now.Add(-wh.history.Window()))
	body := historyBody{
		ID:                id,
		Time:              now.UTC(),
		WindowSeconds:     wh.history.Window().Seconds(),
		ResolutionSeconds: wh.history.Resolution().Seconds(),
		Samples:           jsonSamples(ws),
		Transitions:       jsonTransitions(ws),
		Worker:            e.JSON(),
	}
	if !utf8.ValidString(id) {
		body.IDEscaped = url.PathEscape(id)
	}
	if r.Method == http.MethodHead {
		w.Header()["Content-Type"] = hdrJSON
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	}
	return writeJSON(w, http.StatusOK, body)
}

func jsonSamples(ws history.Series) []historySample {
	out := make([]historySample, len(ws.Samples))
	for i, s := range ws.Samples {
		hs := historySample{
			Time:  time.UnixMilli(s.At).UTC(),
			State: history.StateOf(s.State),
			Memory: historyMemory{
				RSSBytes:       int64(s.RSSKiB) << 10,
				SoftLimitBytes: int64(s.SoftKiB) << 10,
				Roles:          []historyRole{},
			},
			CPU: contract.CPU{MainCores: round4(s.CPUMain), LimitCPUs: round4(s.CPULimit)},
			Runs: historyRuns{
				Worker: int(s.RunsWorker), Scheduler: int(s.RunsScheduler), Capacity: int(s.Capacity),
			},
		}
		for j, role := range ws.Roles {
			if s.RoleMask&(1<<j) != 0 {
				hs.Memory.Roles = append(hs.Memory.Roles, historyRole{
					Role: role, RSSBytes: int64(s.RoleRSS[j]) << 10, SoftLimitBytes: int64(s.RoleSoft[j]) << 10,
				})
			}
		}
		out[i] = hs
	}
	return out
}

func jsonTransitions(ws history.Series) []historyTransition {
	out := make([]historyTransition, len(ws.Transitions))
	for i, t := range ws.Transitions {
		ht := historyTransition{
			Time: time.UnixMilli(t.At).UTC(), From: history.StateOf(t.From), To: history.StateOf(t.To),
			Reasons: make([]historyReason, t.NReasons),
		}
		for j := range ht.Reasons {
			r := t.Reasons[j]
			ht.Reasons[j] = historyReason{Code: r.Code, Value: store.Finite(r.Value), Threshold: store.Finite(r.Threshold)}
		}
		out[i] = ht
	}
	return out
}

// round4 drops the noise a float32 adds (0.42 is 0.41999998688697815).
func round4(f float32) float64 { return math.Round(float64(f)*1e4) / 1e4 }
