package workerhealthextension

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// TestConcurrentReadersWhilePublishing is meant for -race: readers of every
// endpoint (in-process and over real HTTP) while two processors publish.
// Every answer must be internally consistent with some published snapshot.
func TestConcurrentReadersWhilePublishing(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)
	other := component.MustNewIDWithName("worker_health", "other")

	stop := make(chan struct{})
	var publishers, readers sync.WaitGroup
	var published atomic.Int64
	for p, src := range []component.ID{testSource, other} {
		publishers.Add(1)
		go func() {
			defer publishers.Done()
			for gen := 0; ; gen++ {
				select {
				case <-stop:
					return
				default:
				}
				// Every worker of a generation shares one state, so a reader
				// can tell a torn view from a consistent one.
				st := contract.AllStates[gen%len(contract.AllStates)]
				ws := make([]contract.Worker, 50)
				for i := range ws {
					ws[i] = worker(fmt.Sprintf("p%d-w%02d", p, i), st)
				}
				wh.Publish(snapshot(src, t0.Add(time.Duration(gen)*time.Millisecond), ws...))
				published.Add(1)
			}
		}()
	}

	var reads atomic.Int64
	paths := []string{
		"/health/workers/p0-w07", "/health/workers/p1-w42", "/health/workers", "/health/workers?state=lost", "/", "/livez", "/readyz",
		"/health/workers?trend=1", "/workers/p0-w07", "/health/workers/p1-w42/history",
	}
	for r := range 16 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := paths[(r+i)%len(paths)]
				var code int
				var body []byte
				if r%2 == 0 { // in-process, to stress the store without sockets
					rec := httptest.NewRecorder()
					wh.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
					code, body = rec.Code, rec.Body.Bytes()
				} else {
					resp, err := http.Get(base + path)
					if !assert.NoError(t, err) {
						return
					}
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				checkConsistent(t, path, code, body)
				reads.Add(1)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	close(stop)
	publishers.Wait()
	readers.Wait()
	t.Logf("%d reads during %d publishes", reads.Load(), published.Load())
	require.Positive(t, reads.Load())
	require.Positive(t, published.Load())
}

func checkConsistent(t *testing.T, path string, code int, body []byte) {
	switch path {
	case "/workers/p0-w07", "/health/workers/p1-w42/history":
		assert.Contains(t, []int{200, 404}, code, "%s: %s", path, body)
	case "/health/workers", "/health/workers?state=lost", "/health/workers?trend=1":
		var l listBody
		if err := json.Unmarshal(body, &l); err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		assert.Equal(t, len(l.Workers), l.Count)
		states := map[string]contract.State{}
		for _, w := range l.Workers {
			prefix := w.ID[:2]
			if s, ok := states[prefix]; ok {
				assert.Equal(t, s, w.State, "a source's workers come from one snapshot")
			}
			states[prefix] = w.State
		}
	case "/health/workers/p0-w07", "/health/workers/p1-w42":
		if code == http.StatusNotFound {
			return // before the first publish of that source
		}
		var w contract.Worker
		if assert.NoError(t, json.Unmarshal(body, &w)) {
			assert.Equal(t, w.State.MayTakeWork(), code == http.StatusOK)
		}
	default:
		assert.Contains(t, []int{200, 503}, code)
	}
}
