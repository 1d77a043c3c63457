// Package celeryreceiver reads Celery's own event stream (workers started
// with -E) and the queue lengths from the broker (Redis or RabbitMQ), read
// only, and turns them into the records and metrics the worker_health
// processor reads (internal/contract): heartbeats, the runs each worker
// received, started and ended, kills classified from the traceback, and
// pending work per queue. See README.md.
//
//go:generate mdatagen metadata.yaml
package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"
