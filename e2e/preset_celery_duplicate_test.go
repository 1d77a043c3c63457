//go:build e2e

package e2e

// Duplicate execution with Debian's real Celery 5.2.6 on a real
// redis-server: a task with acks_late stays in the Redis transport's
// unacked hash while it runs; a worker that starts once it is older than
// visibility_timeout re-queues it (kombu's restore pass at a worker's
// start, and every 100 s) and runs it again while the first worker still
// does: the same task id, executed twice, no redelivered flag in Celery.
// The receiver's counter and records must show it.

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// recordSink is an OTLP/HTTP endpoint keeping, of the logs the preset
// exports, the records that carry celery.task.redelivered=true as
// "event.name worker run-id".
type recordSink struct {
	mu          sync.Mutex
	redelivered []string
}

func (s *recordSink) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var rd io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				t.Errorf("the OTLP logs the preset sent: %v", err)
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			rd = zr
		}
		body, _ := io.ReadAll(rd)
		if req.URL.Path == "/v1/logs" {
			er := plogotlp.NewExportRequest()
			var err error
			if strings.Contains(req.Header.Get("Content-Type"), "json") {
				err = er.UnmarshalJSON(body)
			} else {
				err = er.UnmarshalProto(body)
			}
			if err != nil {
				t.Errorf("the OTLP logs the preset sent: %v", err)
			}
			s.keep(er)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (s *recordSink) keep(er plogotlp.ExportRequest) {
	rls := er.Logs().ResourceLogs()
	for i := 0; i < rls.Len(); i++ {
		rl := rls.At(i)
		worker := ""
		if v, ok := rl.Resource().Attributes().Get(contract.AttrWorkerID); ok {
			worker = v.Str()
		}
		for j := 0; j < rl.ScopeLogs().Len(); j++ {
			lrs := rl.ScopeLogs().At(j).LogRecords()
			for k := 0; k < lrs.Len(); k++ {
				a := lrs.At(k).Attributes()
				if v, ok := a.Get("celery.task.redelivered"); !ok || !v.Bool() {
					continue
				}
				w := worker
				if v, ok := a.Get(contract.AttrWorkerID); ok {
					w = v.Str() // the broker's view names the worker on the record
				}
				run := ""
				if v, ok := a.Get(contract.AttrRunID); ok {
					run = v.Str()
				}
				s.mu.Lock()
				s.redelivered = append(s.redelivered, lrs.At(k).EventName()+" "+w+" "+run)
				s.mu.Unlock()
			}
		}
	}
}

func (s *recordSink) records() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.redelivered)
}

// logged counts the lines of p's log containing s.
func logged(p *proc, s string) int {
	b, _ := os.ReadFile(p.log)
	return strings.Count(string(b), s)
}

func TestPresetCeleryDuplicate(t *testing.T) {
	defer parallel(t, 95*time.Second)() // its own broker, collector, hostnames and logs (newCeleryRun)
	r := newCeleryRun(t)
	r.prefix += "dup"
	const q = "q-dup"
	sink := &recordSink{}
	r.exportTo = sink.start(t)
	r.startCollector([]string{q}, nil)
	// visibility_timeout 3 s; worker a takes one task at a time
	// (--prefetch-multiplier 1 with -c 1: while its acks_late task runs its
	// prefetch window is full), so the restored message goes to worker b.
	const vt = 3 * time.Second
	env := []string{"VISIBILITY_TIMEOUT=" + strconv.Itoa(int(vt.Seconds()))}
	hA, hB := r.host("a"), r.host("b")
	pA := r.workerEnv("a", q, 1, env, "--prefetch-multiplier=1")

	// 40 s: long enough for worker b to start (10 to 20 s on a loaded
	// host) while a still runs it.
	id := r.send(q, "long_late", 1, "40")[0]
	eventually(t, time.Minute, 200*time.Millisecond, "worker a runs the task", func() error {
		_, w, err := r.health(hA)
		if err != nil {
			return err
		}
		if !slices.Contains(w.Runs.Worker, id) {
			return fmt.Errorf("held %v", w.Runs.Worker)
		}
		return nil
	})
	// The transport's own record: the message in its unacked index (scored
	// with the unix time worker a took it, by this host's clock), older than
	// visibility_timeout, which is what a worker's restore pass looks for.
	opt, err := redis.ParseURL(r.broker)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	eventually(t, time.Minute, 200*time.Millisecond, "the unacked message older than visibility_timeout", func() error {
		zs, err := rdb.ZRangeWithScores(context.Background(), "unacked_index", 0, -1).Result()
		if err != nil {
			return err
		}
		if len(zs) != 1 {
			return fmt.Errorf("unacked_index %v, want the one message", zs)
		}
		if age := time.Since(time.Unix(0, int64(zs[0].Score*1e9))); age <= vt {
			return fmt.Errorf("unacked for %s", age)
		}
		return nil
	})
	pB := r.workerEnv("b", q, 1, env)

	// Celery's own account: both workers received and ran the same id.
	received, succeeded := "Task tasks.long_late["+id+"] received", "Task tasks.long_late["+id+"] succeeded"
	eventually(t, 2*time.Minute, 500*time.Millisecond, "worker b received the task worker a still runs", func() error {
		if n := logged(pB, received); n != 1 {
			return fmt.Errorf("b received it %d times", n)
		}
		return nil
	})
	if n := logged(pA, succeeded); n != 0 {
		t.Fatalf("worker a had ended the task before b received it (%d): no overlap", n)
	}
	eventually(t, 2*time.Minute, 500*time.Millisecond, "both copies succeeded", func() error {
		if a, b := logged(pA, succeeded), logged(pB, succeeded); a != 1 || b != 1 {
			return fmt.Errorf("succeeded on a %d, on b %d", a, b)
		}
		return nil
	})
	if st := r.states([]string{id})[id]; st[0] != "SUCCESS" {
		t.Errorf("Celery's outcome: %v", st)
	}

	// The receiver: the duplicate counted once, b's start and the broker's
	// claim marked redelivered, each copy ended on its own worker.
	eventually(t, time.Minute, time.Second, "otelcol_receiver_celery_tasks_redelivered 1", func() error {
		m, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", r.c.telemetryPort))
		if err != nil {
			return err
		}
		g := regexp.MustCompile(`(?m)^otelcol_receiver_celery_tasks_redelivered(_total)?(\{[^}]*\})? (\S+)$`).FindStringSubmatch(m)
		if g == nil || g[3] != "1" {
			return fmt.Errorf("%v\n%s", g, grepLines(m, "otelcol_receiver_celery"))
		}
		return nil
	})
	eventually(t, time.Minute, time.Second, "the redelivered records exported", func() error {
		recs := sink.records()
		for _, want := range []string{contract.EventStarted + " " + hB + " " + id, contract.EventClaimed + " " + hB + " " + id} {
			if !slices.Contains(recs, want) {
				return fmt.Errorf("no %q in %q", want, recs)
			}
		}
		for _, rec := range recs {
			if strings.Contains(rec, hA) {
				return fmt.Errorf("worker a's first copy marked redelivered: %q", recs)
			}
		}
		return nil
	})
	for _, h := range []string{hA, hB} {
		eventually(t, time.Minute, time.Second, h+" ended its copy", func() error {
			code, w, err := r.health(h)
			if err != nil {
				return err
			}
			if rr, ok := recentRun(w, id); !ok || rr.Result != contract.ResultSuccess {
				return fmt.Errorf("run %s: %+v", id, rr)
			}
			if slices.Contains(w.Runs.Worker, id) {
				return fmt.Errorf("still holds %s", id)
			}
			if code != 200 || w.State != contract.Healthy {
				return fmt.Errorf("%d %s %v", code, w.State, w.Reasons)
			}
			return nil
		})
	}
	// And they stay so past drift.grace (the preset's 10 s) and two
	// evaluations: the broker's claim of the earlier copy closed with it
	// (it stayed open, and worker a turned degraded with drift_missing
	// once the grace ran out, in a CI run).
	stay := time.Now().Add(10*time.Second + 2*2*time.Second + 5*time.Second)
	for time.Now().Before(stay) {
		for _, h := range []string{hA, hB} {
			code, w, err := r.health(h)
			if err != nil {
				t.Fatal(err)
			}
			if code != 200 || w.State != contract.Healthy {
				t.Fatalf("%s after both copies ended: %d %s %v", h, code, w.State, w.Reasons)
			}
		}
		time.Sleep(time.Second) // a poll; the bound is the loop's deadline
	}
	t.Logf("e2e: duplicate execution of %s on %s and %s; records %q", id, hA, hB, sink.records())
	if lines := r.c.errorLines(); len(lines) > 0 {
		t.Errorf("collector errors:\n%s", strings.Join(lines, "\n"))
	}
}
