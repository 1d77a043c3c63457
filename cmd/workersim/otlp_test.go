//go:build linux

package main

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Flattened OTLP data, so assertions read like the conventions table.

type logEvent struct {
	service, worker string // resource service.name, cicd.worker.id (worker_name)
	name            string // event.name
	attrs           map[string]any
}

type span struct {
	service, worker         string
	name                    string
	traceID, spanID, parent string
	attrs                   map[string]any
}

type point struct {
	service, worker string
	metric          string
	attrs           map[string]any
	value           int64
}

func resIDs(r pcommon.Resource) (service, worker string) {
	a := r.Attributes()
	if v, ok := a.Get("service.name"); ok {
		service = v.Str()
	}
	if v, ok := a.Get("cicd.worker.id"); ok {
		worker = v.Str()
	} else if v, ok := a.Get("worker_name"); ok { // the openfn dialect
		worker = v.Str()
	}
	return service, worker
}

func (s *sinks) events() []logEvent {
	var out []logEvent
	for _, ld := range s.logs.AllLogs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			rl := ld.ResourceLogs().At(i)
			svc, w := resIDs(rl.Resource())
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					lr := lrs.At(k)
					out = append(out, logEvent{service: svc, worker: w, name: lr.EventName(), attrs: lr.Attributes().AsRaw()})
				}
			}
		}
	}
	return out
}

// eventCounts counts the events about worker by name: its own, and the
// scheduler's (named "scheduler: NAME") that carry its id.
func (s *sinks) eventCounts(worker string) map[string]int {
	n := map[string]int{}
	for _, e := range s.events() {
		switch {
		case e.worker == worker:
			n[e.name]++
		case str(e.attrs, "cicd.worker.id") == worker:
			n["scheduler: "+e.name]++
		}
	}
	return n
}

func (s *sinks) spans() []span {
	var out []span
	for _, td := range s.traces.AllTraces() {
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			rs := td.ResourceSpans().At(i)
			svc, w := resIDs(rs.Resource())
			for j := 0; j < rs.ScopeSpans().Len(); j++ {
				ss := rs.ScopeSpans().At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					sp := ss.At(k)
					out = append(out, span{
						service: svc, worker: w, name: sp.Name(),
						traceID: sp.TraceID().String(), spanID: sp.SpanID().String(), parent: sp.ParentSpanID().String(),
						attrs: sp.Attributes().AsRaw(),
					})
				}
			}
		}
	}
	return out
}

func (s *sinks) points() []point {
	var out []point
	for _, md := range s.metrics.AllMetrics() {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			rm := md.ResourceMetrics().At(i)
			svc, w := resIDs(rm.Resource())
			for j := 0; j < rm.ScopeMetrics().Len(); j++ {
				ms := rm.ScopeMetrics().At(j).Metrics()
				for k := 0; k < ms.Len(); k++ {
					m := ms.At(k)
					if m.Type() != pmetric.MetricTypeGauge {
						continue
					}
					dps := m.Gauge().DataPoints()
					for d := 0; d < dps.Len(); d++ {
						out = append(out, point{
							service: svc, worker: w, metric: m.Name(),
							attrs: dps.At(d).Attributes().AsRaw(), value: dps.At(d).IntValue(),
						})
					}
				}
			}
		}
	}
	return out
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}
