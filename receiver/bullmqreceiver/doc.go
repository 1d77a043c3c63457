// Package bullmqreceiver reads BullMQ's own state in Redis, read-only, and
// emits what the worker_health processor reads as the scheduler's view and
// each worker's runs: per queue, a snapshot of the active jobs each worker
// holds (BullMQ's processedBy) and of every connected worker (CLIENT LIST),
// run starts and ends from the queue's events stream (resumed from a
// position kept in a storage extension), stalled jobs, and the queue's job
// counts. README.md documents the output, the configuration and the Redis
// ACL it needs.
//
//go:generate mdatagen metadata.yaml
package bullmqreceiver // import "github.com/workerwatch/workerwatch/receiver/bullmqreceiver"
