//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkDashboard runs every panel query of the shipped Grafana dashboard
// against the real Prometheus of the suite and requires data from each, with
// $worker set to a worker that has runs, kills and children.
func checkDashboard(t *testing.T, e env, workerID string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "workerwatch-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					exprs = append(exprs, tg.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if len(exprs) < 10 {
		t.Fatalf("only %d panel queries found", len(exprs))
	}
	r := strings.NewReplacer("$worker", workerID, "${worker}", workerID,
		"$__rate_interval", "1m", "${__rate_interval}", "1m", "$__interval", "15s", "$__range", "5m")
	for _, expr := range exprs {
		q := r.Replace(expr)
		eventually(t, 60*time.Second, 2*time.Second, "panel query "+q, func() error {
			res, err := promQuery(e.prom, q)
			if err != nil {
				return err
			}
			if len(res) == 0 {
				return fmt.Errorf("no data")
			}
			return nil
		})
	}
	t.Logf("e2e: %d dashboard queries returned data for %s", len(exprs), workerID)
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}
