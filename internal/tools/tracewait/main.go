// Command tracewait reads a Go execution trace of a collector (the pprof
// extension's /debug/pprof/trace) and says how long the goroutines serving
// HTTP connections (the health API's requests) waited, runnable, for a P,
// and for each wait over -over what the other Ps were running then and
// whether a GC mark phase was on. With -from and -to (seconds from the
// trace's start) it also lists the CPU time each kind of goroutine had in
// that window. `go tool trace -pprof=sched` gives the same waits as a
// profile by stack; this gives them by request, with their neighbors,
// which is what found the health API's slow answers behind a shard's
// emission (docs/results/scaling.md, runs 29 to 33).
//
// Usage:
//
//	go run ./internal/tools/tracewait [-over 3ms] [-from S -to S] shard.trace
//
// (e.g. the trace WORKERWATCH_SCALE_TRACE=<dir> makes `make scale-figures`'
// test write as <dir>/shard.trace.)
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	over := flag.Duration("over", 3*time.Millisecond, "list each wait longer than this")
	from := flag.Float64("from", 0, "CPU by goroutine from this second of the trace")
	to := flag.Float64("to", 0, "... to this one (0: no CPU listing)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracewait [-over D] [-from S -to S] TRACE")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *over, *from, *to); err != nil {
		fmt.Fprintln(os.Stderr, "tracewait:", err)
		os.Exit(1)
	}
}

// g is what is known of one goroutine: when it last became runnable,
// whether it serves an HTTP connection, and a label from its last stack
// (its entry function and the innermost function not the runtime's).
type g struct {
	runnableAt, runningAt trace.Time
	http                  bool
	label                 string
}

type wait struct {
	at, d  time.Duration
	gc     bool
	others []string
}

func run(path string, over time.Duration, from, to float64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return err
	}
	gs := map[trace.GoID]*g{}
	get := func(id trace.GoID) *g {
		if gs[id] == nil {
			gs[id] = &g{}
		}
		return gs[id]
	}
	running := map[trace.ProcID]trace.GoID{}
	cpu := map[string]time.Duration{}
	var t0 trace.Time
	var marking bool
	var markBegan trace.Time
	var marks int
	var marked time.Duration
	var waits []time.Duration
	var slow []wait
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if t0 == 0 {
			t0 = ev.Time()
		}
		switch ev.Kind() {
		case trace.EventRangeBegin:
			if strings.Contains(ev.Range().Name, "GC concurrent mark") {
				marking, markBegan = true, ev.Time()
				marks++
			}
		case trace.EventRangeEnd:
			if strings.Contains(ev.Range().Name, "GC concurrent mark") && marking {
				marking = false
				marked += ev.Time().Sub(markBegan)
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			id := st.Resource.Goroutine()
			was, now := st.Goroutine()
			gr := get(id)
			if st.Stack != trace.NoStack {
				gr.http = gr.http || serves(st.Stack)
				if l := label(st.Stack); l != "" {
					gr.label = l
				}
			}
			if now == trace.GoRunnable && was != trace.GoRunnable {
				gr.runnableAt = ev.Time()
			}
			if was == trace.GoRunning && now != trace.GoRunning {
				if to > from && gr.runningAt != 0 {
					lo := max(gr.runningAt.Sub(t0).Seconds(), from)
					hi := min(ev.Time().Sub(t0).Seconds(), to)
					if hi > lo {
						name := gr.label
						if gr.http {
							name = "(HTTP connections)"
						}
						cpu[name] += time.Duration((hi - lo) * 1e9)
					}
				}
				gr.runningAt = 0
				for p, on := range running {
					if on == id {
						delete(running, p)
					}
				}
			}
			if now != trace.GoRunning {
				continue
			}
			gr.runningAt = ev.Time()
			p := ev.Proc()
			running[p] = id
			if was != trace.GoRunnable || gr.runnableAt == 0 || !gr.http {
				continue
			}
			d := ev.Time().Sub(gr.runnableAt)
			waits = append(waits, d)
			if d > over {
				w := wait{at: gr.runnableAt.Sub(t0), d: d, gc: marking}
				for q, on := range running {
					if q != p {
						w.others = append(w.others, fmt.Sprintf("P%d %s", q, get(on).label))
					}
				}
				slices.Sort(w.others)
				slow = append(slow, w)
			}
		}
	}
	slices.Sort(waits)
	q := func(f float64) time.Duration {
		if len(waits) == 0 {
			return 0
		}
		return waits[min(len(waits)-1, int(f*float64(len(waits))))]
	}
	fmt.Printf("HTTP connection goroutines, runnable to running: %d waits, p50 %v, p99 %v, p99.9 %v, max %v\n",
		len(waits), q(0.5), q(0.99), q(0.999), q(1))
	fmt.Printf("GC mark phases: %d, %v in all\n", marks, marked)
	if to > from {
		type kv struct {
			name string
			d    time.Duration
		}
		var byCPU []kv
		for k, v := range cpu {
			byCPU = append(byCPU, kv{k, v})
		}
		slices.SortFunc(byCPU, func(a, b kv) int { return cmp.Compare(b.d, a.d) })
		fmt.Printf("CPU from %.2fs to %.2fs:\n", from, to)
		for _, x := range byCPU[:min(len(byCPU), 25)] {
			fmt.Printf("  %8.1f ms  %s\n", float64(x.d)/1e6, x.name)
		}
	}
	fmt.Printf("waits over %v (when, how long, a GC mark phase on, what the other Ps ran):\n", over)
	for _, w := range slow {
		fmt.Printf("  %8.3fs %7.2f ms gc=%-5v %s\n", w.at.Seconds(), float64(w.d)/1e6, w.gc, strings.Join(w.others, " | "))
	}
	return nil
}

// serves: a goroutine of net/http's server serving a connection.
func serves(s trace.Stack) bool {
	for f := range s.Frames() {
		if strings.HasPrefix(f.Func, "net/http.(*conn).serve") {
			return true
		}
	}
	return false
}

// label is "entry @ innermost": the stack's outermost function that is not
// the runtime's (what the goroutine is) and its innermost that is none of
// the runtime's, sync's or internal/'s (what it was doing).
func label(s trace.Stack) string {
	var frames []string
	for f := range s.Frames() {
		frames = append(frames, f.Func)
	}
	entry, inner := "", ""
	for i := len(frames) - 1; i >= 0 && entry == ""; i-- {
		if !strings.HasPrefix(frames[i], "runtime.") {
			entry = frames[i]
		}
	}
	for _, fn := range frames {
		if !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "internal/") && !strings.HasPrefix(fn, "sync.") {
			inner = fn
			break
		}
	}
	if entry == "" && len(frames) > 0 {
		return short(frames[len(frames)-1])
	}
	return short(entry) + " @ " + short(inner)
}

func short(fn string) string {
	return fn[strings.LastIndex(fn, "/")+1:]
}
