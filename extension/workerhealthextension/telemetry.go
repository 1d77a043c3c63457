package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
)

// telemetry is the extension's own metrics, in one place. Attribute sets are
// built once per (route, code) and reused: the per-worker endpoint is hot.
type telemetry struct {
	tb   *metadata.TelemetryBuilder
	sets sync.Map // routeCode -> metric.MeasurementOption
}

type routeCode struct {
	route string
	code  int
}

func newTelemetry(tb *metadata.TelemetryBuilder) *telemetry { return &telemetry{tb: tb} }

func (t *telemetry) request(ctx context.Context, route string, code int) {
	k := routeCode{route, code}
	opt, ok := t.sets.Load(k)
	if !ok {
		opt, _ = t.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(
			attribute.String("endpoint", route),
			attribute.Int("http.response.status_code", code),
		)))
	}
	t.tb.WorkerHealthRequests.Add(ctx, 1, opt.(metric.MeasurementOption))
}

func (t *telemetry) published() {
	t.tb.WorkerHealthPublishes.Add(context.Background(), 1)
}
