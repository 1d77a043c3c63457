package workerhealthextension

import (
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// leak is a worker whose main process leaks: healthy under the soft limit,
// then from overAt on unhealthy with memory_over_soft_limit, as the
// processor reports it.
type leak struct {
	id             string
	start, overAt  time.Time
	soft, mainSoft int64
}

// at is the worker as a snapshot taken at t shows it.
func (l leak) at(t time.Time) contract.Worker {
	w := worker(l.id, contract.Healthy)
	elapsed := t.Sub(l.start)
	main := int64(120<<20) + int64(elapsed/time.Second)*(200<<10) // +200 KiB/s
	child := int64(60<<20) + int64(elapsed/time.Second%60)*(1<<20)
	w.Memory = contract.Memory{
		RSSBytes: main + child, SoftLimitBytes: l.soft,
		Roles: []contract.RoleMemory{
			{Role: contract.RoleChild, RSSBytes: child},
			{Role: contract.RoleMain, RSSBytes: main, SoftLimitBytes: l.mainSoft},
		},
	}
	w.CPU = contract.CPU{MainCores: 0.25 + 0.1*float64(elapsed/time.Minute%3), LimitCPUs: 2}
	n := int(elapsed / (90 * time.Second) % 3)
	for i := range n {
		w.Runs.Worker = append(w.Runs.Worker, "run-"+string(rune('a'+i)))
	}
	w.Runs.Scheduler = w.Runs.Worker
	w.Runs.Capacity = 2
	w.Since, w.LastSeen = contract.TimeOf(l.start), contract.TimeOf(t)
	if !t.Before(l.overAt) {
		w.State, w.Since = contract.Unhealthy, contract.TimeOf(l.overAt)
		w.Reasons = []contract.Reason{{
			Code: "memory_over_soft_limit", Message: "main process memory over its soft limit for 3 samples",
			Value: float64(main), Threshold: float64(l.mainSoft), Since: l.overAt,
		}}
		w.Memory.OverSamples = 3
	}
	w.Sources = contract.NewSources(
		contract.Source{Seen: true, LastSeen: contract.TimeOf(t), IDs: contract.IDList("worker_name=" + l.id)},
		contract.Source{Seen: true, LastSeen: contract.TimeOf(t), IDs: contract.IDList("cicd.worker.id=" + l.id)},
		contract.Source{Seen: false, IDs: contract.IDList()},
	)
	w.Runs.Recent = contract.PackRuns([]contract.RunRecord{
		{ID: "run-9", Result: contract.ResultSuccess, Started: t.Add(-4 * time.Minute), Ended: t.Add(-3 * time.Minute), DurationSeconds: 60},
		{ID: "run-8", Attempt: 2, Result: contract.ResultTimeout, KillReason: contract.KillTimeout, Started: t.Add(-10 * time.Minute), Ended: t.Add(-5 * time.Minute), DurationSeconds: 300},
	})
	w.Runs.Kills = map[string]int64{contract.KillTimeout: 1}
	w.Incarnation = &contract.Incarnation{
		ID: "4242@" + l.start.UTC().Format(time.RFC3339), Source: contract.IncarnationTree,
		PID: 4242, Started: contract.TimeOf(l.start), FirstSeen: contract.TimeOf(l.start),
	}
	return w
}

// publishHistory publishes one snapshot every 10 s from start to end with
// the workers gen makes at each time, waiting for each to be served.
func publishHistory(wh *workerHealth, start, end time.Time, gen func(time.Time) []contract.Worker) {
	for t := start; !t.After(end); t = t.Add(10 * time.Second) {
		publish(wh, snapshot(testSource, t, gen(t)...))
	}
}
