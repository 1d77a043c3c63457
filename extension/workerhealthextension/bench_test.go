package workerhealthextension

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// The handler costs behind the performance targets, without sockets:
//
//	go test -run '^$' -bench . -benchmem ./extension/workerhealthextension/
func BenchmarkWorkerHandler(b *testing.B) {
	wh := newTestExt(b)
	s := realisticFleet(10_000, time.Now())
	wh.Publish(s)
	reqs := make([]*http.Request, 0, 1024)
	for i := 0; i < 1024; i++ {
		reqs = append(reqs, httptest.NewRequest(http.MethodGet, "/health/workers/"+url.PathEscape(s.Workers[i*9%len(s.Workers)].ID), nil))
	}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		wh.handler.ServeHTTP(w, reqs[i%len(reqs)])
	}
}

func BenchmarkWorkersList10k(b *testing.B) {
	wh := newTestExt(b)
	wh.Publish(realisticFleet(10_000, time.Now()))
	req := httptest.NewRequest(http.MethodGet, "/health/workers", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wh.handler.ServeHTTP(&discardWriter{h: http.Header{}}, req)
	}
}

func BenchmarkWorkersListFiltered10k(b *testing.B) {
	wh := newTestExt(b)
	wh.Publish(realisticFleet(10_000, time.Now()))
	req := httptest.NewRequest(http.MethodGet, "/health/workers?state=unhealthy,stalled", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wh.handler.ServeHTTP(&discardWriter{h: http.Header{}}, req)
	}
}

func BenchmarkPage10k(b *testing.B) {
	wh := newTestExt(b)
	wh.Publish(realisticFleet(10_000, time.Now()))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wh.handler.ServeHTTP(&discardWriter{h: http.Header{}}, req)
	}
}

// BenchmarkPublish10k is what the processor pays per snapshot: encoding every
// worker once and building the index.
func BenchmarkPublish10k(b *testing.B) {
	wh := newTestExt(b)
	s := realisticFleet(10_000, time.Now())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Time = s.Time.Add(time.Millisecond)
		wh.Publish(s)
	}
}

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the handler and not a recorder's buffer.
type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }
func (d *discardWriter) Write(p []byte) (int, error) { return io.Discard.Write(p) }
