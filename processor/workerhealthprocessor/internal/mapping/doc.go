// Package mapping turns the worker_health processor's input (log records,
// spans and the tree metrics, as pdata) into plain batches of events and
// samples, with its own config types. It knows records, not verdicts: no
// worker state lives here.
package mapping // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
