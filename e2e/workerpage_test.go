//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// history is the part of GET /health/workers/{id}/history the suite checks
// (docs/http-api.md).
type history struct {
	Samples []struct {
		Time   time.Time      `json:"time"`
		State  contract.State `json:"state"`
		Memory struct {
			RSSBytes int64 `json:"rss_bytes"`
			Roles    []struct {
				Role     string `json:"role"`
				RSSBytes int64  `json:"rss_bytes"`
			} `json:"roles"`
		} `json:"memory"`
	} `json:"samples"`
	Transitions []struct {
		Time time.Time      `json:"time"`
		From contract.State `json:"from"`
		To   contract.State `json:"to"`
	} `json:"transitions"`
	Worker contract.Worker `json:"worker"`
}

// checkLeakHistory: in the real pipeline (receiver, processor, extension),
// the leak worker's history climbs, its last transition is to unhealthy at
// the time the processor gives (its since), and its page draws the same.
func checkLeakHistory(t *testing.T, e env, id string) {
	t.Helper()
	var h history
	eventually(t, 30*time.Second, time.Second, id+" history with the change to unhealthy", func() error {
		code, err := getJSON(e.health+"/health/workers/"+url.PathEscape(id)+"/history", &h)
		switch {
		case err != nil:
			return err
		case code != http.StatusOK:
			return fmt.Errorf("HTTP %d", code)
		case len(h.Samples) < 5:
			return fmt.Errorf("%d samples", len(h.Samples))
		case len(h.Transitions) == 0 || h.Transitions[len(h.Transitions)-1].To != contract.Unhealthy:
			return fmt.Errorf("transitions %+v", h.Transitions)
		}
		return nil
	})
	first, last := h.Samples[0], h.Samples[len(h.Samples)-1]
	if last.Memory.RSSBytes <= first.Memory.RSSBytes {
		t.Errorf("no climb: %d bytes at %s, %d at %s", first.Memory.RSSBytes, first.Time, last.Memory.RSSBytes, last.Time)
	}
	if last.State != contract.Unhealthy {
		t.Errorf("last sample %s, want unhealthy", last.State)
	}
	tr := h.Transitions[len(h.Transitions)-1]
	if !tr.Time.Equal(h.Worker.Since.Time().Truncate(time.Millisecond)) {
		t.Errorf("transition to unhealthy at %s, the processor says since %s", tr.Time, h.Worker.Since)
	}
	roles := map[string]bool{}
	for _, r := range last.Memory.Roles {
		roles[r.Role] = true
	}
	if !roles[contract.RoleMain] {
		t.Errorf("no main role in the last sample: %+v", last.Memory.Roles)
	}
	t.Logf("e2e: %s history: %d samples, %d -> %d bytes, unhealthy at %s", id, len(h.Samples),
		first.Memory.RSSBytes, last.Memory.RSSBytes, tr.Time.Format(time.RFC3339Nano))

	// The page draws the same: the memory chart with the tree's line and a
	// mark at that time.
	resp, err := http.Get(e.health + "/workers/" + url.PathEscape(id))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /workers/%s: %d %v", id, resp.StatusCode, err)
	}
	doc, err := html.Parse(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var sawTree, sawMark bool
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			for _, a := range n.Attr {
				sawTree = sawTree || n.Data == "polyline" && a.Key == "data-series" && a.Val == "tree"
				sawMark = sawMark || n.Data == "line" && a.Key == "data-at" && a.Val == tr.Time.UTC().Format(time.RFC3339)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if !sawTree || !sawMark {
		t.Errorf("worker page: tree line %v, mark at %s %v", sawTree, tr.Time.UTC().Format(time.RFC3339), sawMark)
	}
}
