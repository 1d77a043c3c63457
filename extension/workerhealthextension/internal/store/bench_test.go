package store

import (
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/fleettest"
)

// BenchmarkWorkerJSON is a worker's JSON as the health API encodes it, once
// for each worker asked for after a publish (Entry.JSON), over the workers
// of fleettest.RealisticFleet (drift, reasons and all):
//
//	go test -run '^$' -bench BenchmarkWorkerJSON -benchmem ./extension/workerhealthextension/internal/store/
func BenchmarkWorkerJSON(b *testing.B) {
	s := fleettest.RealisticFleet(1000, time.Now())
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if len(NewEntry(&s.Workers[i%len(s.Workers)], s.Time).JSON()) == 0 {
			b.Fatal("no JSON")
		}
	}
}
